// A plugin developer tries an extension in `host-sim dev`'s console: signs
// in with the printed token, opens the project's developer view, runs an
// action from the form its input schema built, and sees the output, the
// extension's own log line and the document it stored; a bad input shows
// the error that names the field. The page passes axe-core.
//
// Run by `cargo test -p workspace-tests --test browser` (tests/browser.rs),
// which starts the provider fake and `host-sim dev` with the analytics
// plugin's component.
//
// Environment:
//   BASE_URL   host-sim dev's origin, e.g. http://127.0.0.1:8787   (required)
//   TOKEN      the token host-sim dev printed                       (required)
//   PROJECT    the project host-sim dev made                        (required)
//   EXTENSION  the extension's id                                   (required)
//   CHROMIUM   the browser binary                        [/usr/bin/chromium]
//
// Exits 0 when every check passed, 1 with one line saying which failed.

import { STEP_TIMEOUT_MS, audit, check, launchChromium, log, required, watchProblems } from "./support.mjs";

let step = "reading the environment";
const problems = [];
let browser;

try {
  const baseUrl = required("BASE_URL").replace(/\/$/, "");
  const token = required("TOKEN");
  const project = required("PROJECT");
  const extension = required("EXTENSION");
  const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";

  step = `launching ${executablePath}`;
  browser = await launchChromium(executablePath);
  const page = await (await browser.newContext({ viewport: { width: 1000, height: 900 } })).newPage();
  page.setDefaultTimeout(STEP_TIMEOUT_MS);
  watchProblems(page, problems);

  step = "signing in with the printed token";
  await page.goto(`${baseUrl}/console`);
  await page.locator("#token").fill(token);
  await Promise.all([
    page.waitForURL("**/console**"),
    page.locator('form[action="/console/sign-in"] button[type="submit"]').click(),
  ]);
  await page.goto(`${baseUrl}/console/projects/${project}`);
  log(`signed in; on the project page of ${project}`);

  step = "opening the developer view from the project page";
  await Promise.all([
    page.waitForURL(`**/console/projects/${project}/extensions/${extension}/develop`),
    page.getByRole("link", { name: `Developer view of ${extension}` }).click(),
  ]);
  await page.getByRole("heading", { name: "Actions" }).waitFor();
  await audit(page, "the developer view");
  log("the developer view lists the actions; axe clean");

  const form = (action) =>
    page.locator("section.dev-action", { has: page.getByRole("heading", { name: action, exact: true }) });

  step = "running analytics.provision from its form";
  const provision = form("analytics.provision");
  await provision.getByLabel("name (required)").fill("Developer shop");
  await provision.getByLabel("domain (required)").fill("dev.example.com");
  await provision.getByRole("button", { name: "Run analytics.provision" }).click();
  // The page comes back with the invocation on top (the newest first).
  await page.locator("article.invocation").nth(0).waitFor();
  const latest = page.locator("article.invocation").first();
  const ran = await latest.innerText();
  check(ran.includes("analytics.provision") && /\bok\b/.test(ran), `the latest invocation is not an ok provision: ${ran}`);
  check(ran.includes('"domain": "dev.example.com"'), `the output does not show the domain: ${ran}`);
  check(/info\s+created website [0-9a-f-]{36} on the provider/.test(ran), `the extension's log line is missing: ${ran}`);
  log("provision ran from the form: ok, its output and the extension's log line are shown");

  step = "finding the stored document";
  const documents = await page.locator("table.documents").innerText();
  check(/\bsite\b/.test(documents) && documents.includes("dev.example.com"), `the documents table: ${documents}`);
  log("the documents table shows the project's site document");

  step = "running analytics.stats with a start before its minimum";
  const stats = form("analytics.stats");
  await stats.getByLabel("start_at (required)").fill("1");
  await stats.getByLabel("end_at (required)").fill("2");
  await stats.getByRole("button", { name: "Run analytics.stats" }).click();
  await page.locator("article.invocation").nth(1).waitFor();
  const failed = page.locator("article.invocation").first();
  const said = await failed.innerText();
  check(
    (await failed.getAttribute("class")).includes("failed") && said.includes("invalid_input") && said.includes("start_at"),
    `the failed stats call does not show the error naming start_at: ${said}`,
  );
  await audit(page, "the developer view with a failed invocation");
  log("a bad input shows invalid_input naming start_at; axe clean");

  check(problems.length === 0, `the browser saw problems:\n    ${problems.join("\n    ")}`);
  console.log("developer view: every check passed");
} catch (error) {
  console.error(`FAILED while ${step}: ${error.message}`);
  process.exitCode = 1;
} finally {
  await browser?.close();
}
