// What the browser specs share: the step timeout, reading the environment,
// a check that throws with its message, the line for a passed check, and
// the axe-core audit.

import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { chromium } from "playwright-core";

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

/// Chromium, headless; without its own sandbox when running as root (CI
/// containers), where it cannot start.
export function launchChromium(executablePath) {
  return chromium.launch({
    executablePath,
    headless: true,
    args: process.getuid?.() === 0 ? ["--no-sandbox"] : [],
  });
}

/// Pushes onto `problems` every page error of `page` and every answer of 500
/// or more it receives.
export function watchProblems(page, problems) {
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("response", (response) => {
    if (response.status() >= 500) {
      problems.push(`${response.request().method()} ${response.url()} answered ${response.status()}`);
    }
  });
}

let axeSource;

/// Runs axe-core on the document of `target` (a page or a frame) and throws
/// naming every serious or critical violation. axe is evaluated through the
/// DevTools protocol, which the console's CSP (`script-src 'self'`) does not
/// govern, so the pages are audited under their real policy. Frames are
/// audited on their own (`iframes: false`).
export async function audit(target, what) {
  if (!(await target.evaluate(() => typeof window.axe === "object"))) {
    axeSource ??= readFileSync(new URL("./node_modules/axe-core/axe.min.js", import.meta.url), "utf8");
    await target.evaluate(axeSource);
  }
  const found = await target.evaluate(async () => {
    const result = await window.axe.run(document, {
      iframes: false,
      resultTypes: ["violations"],
    });
    return result.violations
      .filter((v) => v.impact === "serious" || v.impact === "critical")
      .map(
        (v) =>
          `${v.id} (${v.impact}): ${v.help}; at ${v.nodes
            .slice(0, 4)
            .map((n) => `${n.target.join(" ")} ${n.failureSummary?.replace(/\s+/g, " ") ?? ""}`)
            .join(" | ")}`,
      );
  });
  check(found.length === 0, `axe-core found on ${what}:\n    ${found.join("\n    ")}`);
}
