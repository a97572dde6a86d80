// The customer's flow in a real browser: sign in to the host-sim console,
// set up website analytics in the panel, send page views to the provider the
// way the tracking script does, and see them counted in the panel.
//
// Run by `cargo test -p workspace-tests --test browser` (tests/browser.rs),
// which starts the provider fake and `host-sim serve`. By hand, against
// `cargo xtask demo`:
//
//   CONSOLE_URL=http://127.0.0.1:8080/console TOKEN=$(cat .demo/token) \
//   PROVIDER_URL=http://127.0.0.1:3300 PROJECT=demo-shop \
//   node tests/browser/console.spec.mjs
//
// Environment:
//   CONSOLE_URL   the console's sign-in page                       (required)
//   TOKEN         a host token with access to PROJECT only          (required)
//   PROVIDER_URL  the Umami-compatible provider (its /api/send)      (required)
//   PROJECT       the project the token reaches                      (required)
//   SCREENSHOT    where to write the final screenshot   [target/browser/console.png]
//   EVENTS        how many page views to send                        [3]
//   FRESH         "1": the provider has no page views for this site yet, so
//                 the panel must show 0 before and exactly EVENTS after
//   DOMAIN        the website's public domain          [shop-<random>.example.com]
//   CHROMIUM      the browser binary                                 [/usr/bin/chromium]
//
// Exits 0 when every check passed, 1 with one line saying which failed.

import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { chromium } from "playwright-core";
import { STEP_TIMEOUT_MS, check, log, required } from "./support.mjs";

const BROWSER_UA =
  "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Safari/537.36";

let step = "reading the environment";
const problems = [];
let browser;
let page;

try {
  const consoleUrl = required("CONSOLE_URL");
  const token = required("TOKEN");
  const providerUrl = required("PROVIDER_URL").replace(/\/$/, "");
  const project = required("PROJECT");
  const screenshot = process.env.SCREENSHOT || "target/browser/console.png";
  const events = Number.parseInt(process.env.EVENTS || "3", 10);
  const fresh = process.env.FRESH === "1";
  const domain =
    process.env.DOMAIN || `shop-${Math.random().toString(36).slice(2, 8)}.example.com`;
  const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
  check(events > 0, `EVENTS must be a positive number, not ${process.env.EVENTS}`);

  step = `launching ${executablePath}`;
  browser = await chromium.launch({
    executablePath,
    headless: true,
    // Chromium's own sandbox cannot start as root (CI containers).
    args: process.getuid?.() === 0 ? ["--no-sandbox"] : [],
  });
  const context = await browser.newContext({ viewport: { width: 1100, height: 1400 } });
  page = await context.newPage();
  page.setDefaultTimeout(STEP_TIMEOUT_MS);
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    // Chromium logs every 4xx as "Failed to load resource"; some are the
    // design (404 not_provisioned before setup, no /favicon.ico). Server
    // failures are caught by status below.
    if (message.type() === "error" && !message.text().startsWith("Failed to load resource")) {
      problems.push(`console error in ${message.location().url}: ${message.text()}`);
    }
  });
  page.on("response", (response) => {
    if (response.status() >= 500) {
      problems.push(`${response.request().method()} ${response.url()} answered ${response.status()}`);
    }
  });

  step = `opening ${consoleUrl}`;
  await page.goto(consoleUrl);
  await page.locator("#token").waitFor();
  check(
    (await page.locator("#token").getAttribute("type")) === "password",
    "the token input is not a password field",
  );
  log("the console asks for a token");

  step = "signing in";
  await page.locator("#token").fill(token);
  await Promise.all([
    page.waitForURL(`**/console/projects/${project}`),
    page.locator('form[action="/console/sign-in"] button[type="submit"]').click(),
  ]);
  check(!page.url().includes(token), `the page URL contains the token: ${page.url()}`);
  check(!(await page.content()).includes(token), "the console page's HTML contains the token");
  const consoleCookies = await page.evaluate(() => document.cookie);
  check(consoleCookies === "", `the console's scripts can read a cookie: ${consoleCookies}`);
  log(`signed in; on ${new URL(page.url()).pathname}, the token is in neither URL nor page`);

  step = "finding the panel's iframe";
  const iframe = page.locator("iframe.panel");
  await iframe.waitFor();
  const sandbox = await iframe.getAttribute("sandbox");
  check(
    sandbox === "allow-scripts allow-forms",
    `the panel iframe's sandbox is ${JSON.stringify(sandbox)}, not "allow-scripts allow-forms"`,
  );
  const src = await iframe.getAttribute("src");
  check(!src.includes(token), `the iframe src contains the token: ${src}`);
  const frame = await (await iframe.elementHandle()).contentFrame();
  check(frame, "the panel iframe has no frame");
  log(`panel iframe ${src}, sandbox="${sandbox}"`);

  step = "waiting for the panel's setup form";
  await frame.locator("#site-form").waitFor();
  log("the panel shows the setup form");

  step = "checking what the panel's document can reach";
  const reach = await frame.evaluate(() => {
    const attempt = (read) => {
      try {
        return `readable: ${String(read())}`;
      } catch (error) {
        return `blocked (${error.name})`;
      }
    };
    return {
      origin: window.origin,
      localStorage: attempt(() => window.localStorage.length),
      cookie: attempt(() => document.cookie),
      parent: attempt(() => window.parent.document.cookie),
      url: window.location.href,
      html: document.documentElement.outerHTML,
    };
  });
  check(reach.origin === "null", `the panel's origin is ${reach.origin}, not opaque`);
  for (const what of ["localStorage", "cookie", "parent"]) {
    check(
      reach[what].startsWith("blocked"),
      `the panel's document can read ${what}: ${reach[what]}`,
    );
  }
  check(!reach.url.includes(token), "the panel's URL contains the user's token");
  check(!reach.html.includes(token), "the panel's document contains the user's token");
  log(
    `the panel's origin is opaque; localStorage ${reach.localStorage}, cookies ${reach.cookie}, parent ${reach.parent}`,
  );

  step = "setting up the website";
  await frame.locator("#site-name").fill("Browser test shop");
  await frame.locator("#site-domain").fill(domain);
  await frame.locator('#site-form button[type="submit"]').click();
  const script = frame.locator("#tracking-script");
  await script.waitFor();
  const tag = await script.textContent();
  const websiteId = tag.match(/data-website-id="([0-9a-f-]{36})"/)?.[1];
  check(websiteId, `the tracking script has no data-website-id: ${tag}`);
  check(
    tag.includes(`data-domains="${domain}"`),
    `the tracking script does not restrict to ${domain}: ${tag}`,
  );
  check(tag.includes(`${providerUrl}/script.js`), `the tracking script is not from ${providerUrl}: ${tag}`);
  log(`provisioned ${domain}: ${tag}`);

  const pageViews = frame.locator(".stats .card").filter({ hasText: "Page views" }).locator("dd");
  step = "waiting for the seven-day numbers";
  await pageViews.waitFor();
  const before = Number.parseInt((await pageViews.textContent()).replace(/\D/g, ""), 10);
  if (fresh) {
    check(before === 0, `a fresh website shows ${before} page views, not 0`);
  }
  log(`the panel shows ${before} page views for the last seven days`);

  step = `sending ${events} page views to ${providerUrl}/api/send`;
  for (let i = 0; i < events; i++) {
    const response = await fetch(`${providerUrl}/api/send`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "User-Agent": BROWSER_UA },
      body: JSON.stringify({
        type: "event",
        payload: {
          website: websiteId,
          hostname: domain,
          url: `/page-${i}`,
          title: `Page ${i}`,
          language: "en-US",
          screen: "1280x720",
          referrer: "",
        },
      }),
    });
    const body = await response.text();
    check(response.ok && body.includes("sessionId"), `/api/send answered ${response.status}: ${body}`);
  }
  log(`the provider recorded ${events} page views`);

  step = "refreshing the panel's statistics";
  const expected = String(before + events);
  await frame.locator(".stats .section-head button", { hasText: "Refresh" }).click();
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
    const shown = await pageViews.textContent().catch(() => "(no card)");
    throw new Error(`after Refresh the panel shows ${shown} page views, expected ${expected}`);
  }
  const cards = await frame.locator(".stats .card").evaluateAll((nodes) =>
    nodes.map((n) => `${n.querySelector("dt").textContent.trim()} ${n.querySelector("dd").textContent.trim()}`),
  );
  const visitors = Number.parseInt(
    (await frame.locator(".stats .card").filter({ hasText: "Visitors" }).locator("dd").textContent()).replace(/\D/g, ""),
    10,
  );
  check(visitors >= 1, `after ${events} page views the panel shows ${visitors} visitors`);
  await frame.locator(".stats figure.chart svg").waitFor();
  log(`after Refresh: ${cards.join(", ")}; the per-day chart is drawn`);

  check(problems.length === 0, `the page reported errors:\n    ${problems.join("\n    ")}`);

  step = `taking a screenshot to ${screenshot}`;
  mkdirSync(dirname(screenshot), { recursive: true });
  await page.screenshot({ path: screenshot, fullPage: true });
  log(`screenshot ${screenshot}`);
  await browser.close();
  console.log("browser test passed");
} catch (error) {
  console.error(`browser test failed while ${step}: ${error.message}`);
  for (const problem of problems) {
    console.error(`  ${problem}`);
  }
  if (page) {
    const path = (process.env.SCREENSHOT || "target/browser/console.png").replace(/\.png$/, "-failure.png");
    try {
      mkdirSync(dirname(path), { recursive: true });
      await page.screenshot({ path, fullPage: true });
      console.error(`  screenshot of the failure: ${path}`);
    } catch {}
  }
  await browser?.close().catch(() => {});
  process.exit(1);
}
