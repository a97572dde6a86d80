// A page on the customer's domain loads the tracking script from the
// project's own tracking hostname (Chromium's --host-resolver-rules point
// both names at loopback servers), the page view goes to that hostname's
// ingress and on to the provider, and the console's panel counts it.
//
// Run by `cargo test -p workspace-tests --test browser` (tests/browser.rs),
// which sets up the tracking domain, the edge (nginx with the exported
// routing) and the customer's page.
//
// Environment (all required but CHROMIUM):
//   PAGE_URL          the customer's page, e.g. http://www.shop.example:PORT/
//   TRACKING_ORIGIN   https://<tracking hostname>
//   RESOLVER_RULES    Chromium's --host-resolver-rules
//   CONSOLE_URL, TOKEN, PROJECT   the console's sign-in page, a token, its project
//   EXPECTED          the page views the panel must show afterwards
//   CHROMIUM          the browser binary                   [/usr/bin/chromium]
//
// Exits 0 when every check passed, 1 with one line saying which failed.

import { chromium } from "playwright-core";
import { STEP_TIMEOUT_MS, check, log, required } from "./support.mjs";

let step = "reading the environment";
let browser;

try {
  const pageUrl = required("PAGE_URL");
  const trackingOrigin = required("TRACKING_ORIGIN");
  const rules = required("RESOLVER_RULES");
  const consoleUrl = required("CONSOLE_URL");
  const token = required("TOKEN");
  const project = required("PROJECT");
  const expected = required("EXPECTED");
  const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";

  step = `launching ${executablePath}`;
  const args = [`--host-resolver-rules=${rules}`];
  if (process.getuid?.() === 0) {
    args.push("--no-sandbox");
  }
  browser = await chromium.launch({ executablePath, headless: true, args });
  // The edge's certificate comes from the test's own CA (wait-tls checked
  // it against that root); the browser is told to accept it.
  const context = await browser.newContext({ ignoreHTTPSErrors: true });
  const page = await context.newPage();
  page.setDefaultTimeout(STEP_TIMEOUT_MS);

  step = `opening the customer's page ${pageUrl}`;
  const scriptResponse = page.waitForResponse(`${trackingOrigin}/script.js`);
  const sendResponse = page.waitForResponse(
    (response) => response.url() === `${trackingOrigin}/api/send` && response.request().method() === "POST",
  );
  await page.goto(pageUrl);
  const script = await scriptResponse;
  check(script.ok(), `${trackingOrigin}/script.js answered ${script.status()}`);
  log(`the page loaded ${trackingOrigin}/script.js (${script.status()})`);
  step = `waiting for the page view to ${trackingOrigin}/api/send`;
  const send = await sendResponse;
  const body = await send.text();
  check(send.ok() && body.includes("sessionId"), `/api/send answered ${send.status()}: ${body}`);
  log(`the page view went to ${trackingOrigin}/api/send (${send.status()})`);

  step = `signing in to ${consoleUrl}`;
  const consolePage = await context.newPage();
  consolePage.setDefaultTimeout(STEP_TIMEOUT_MS);
  await consolePage.goto(consoleUrl);
  await consolePage.locator("#token").fill(token);
  await Promise.all([
    consolePage.waitForURL(`**/console/projects/${project}`),
    consolePage.locator('form[action="/console/sign-in"] button[type="submit"]').click(),
  ]);
  const iframe = consolePage.locator("iframe.panel");
  await iframe.waitFor();
  const frame = await (await iframe.elementHandle()).contentFrame();
  check(frame, "the panel iframe has no frame");

  step = `waiting for the panel to show ${expected} page views`;
  try {
    await frame.waitForFunction(
      (want) =>
        [...document.querySelectorAll(".stats .card")]
          .find((card) => card.querySelector("dt")?.textContent.trim() === "Page views")
          ?.querySelector("dd")
          ?.textContent.replace(/\D/g, "") === want,
      expected,
      { timeout: STEP_TIMEOUT_MS },
    );
  } catch {
    const shown = await frame
      .locator(".stats .card")
      .filter({ hasText: "Page views" })
      .locator("dd")
      .textContent()
      .catch(() => "(no card)");
    throw new Error(`the panel shows ${shown} page views, expected ${expected}`);
  }
  log(`the panel counts ${expected} page view(s)`);
  const tag = await frame.locator("#tracking-script").textContent().catch(() => "");
  check(
    tag === "" || tag.includes(`${trackingOrigin}/script.js`),
    `the panel's tracking script is not from ${trackingOrigin}: ${tag}`,
  );
  await browser.close();
  console.log("tracking domain browser test passed");
} catch (error) {
  console.error(`tracking domain browser test failed while ${step}: ${error.message}`);
  await browser?.close().catch(() => {});
  process.exit(1);
}
