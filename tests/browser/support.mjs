// What the browser specs share: the step timeout, reading the environment,
// a check that throws with its message, and the line for a passed check.

import { basename } from "node:path";

export const STEP_TIMEOUT_MS = 30_000;

/// The value of environment variable `name`; a missing one names the spec
/// being run, whose header lists what it needs.
export function required(name) {
  const value = process.env[name];
  if (!value) {
    const spec = basename(process.argv[1] ?? "the spec");
    throw new Error(`environment variable ${name} is not set (see the top of ${spec})`);
  }
  return value;
}

export function check(condition, message) {
  if (!condition) {
    throw new Error(message);
  }
}

export const log = (message) => console.log(`  ✓ ${message}`);
