// The customer's flow with the keyboard only, audited by axe-core, and the
// panel's size in the console: sign in, set up website analytics in the
// panel, copy the tracking script, refresh the statistics — every step by
// page.keyboard, with a visible focus — while axe-core finds no serious or
// critical violation on any console page or panel state (light and dark);
// the panel follows prefers-color-scheme and prefers-reduced-motion; the
// console sizes the panel's iframe to its content at 360, 768 and 1280 px
// (no inner scrollbar, a screenshot of each).
//
// Run by `cargo test -p workspace-tests --test browser` (tests/browser.rs),
// which starts the provider fake and `host-sim serve` for a fresh project.
//
// Environment:
//   CONSOLE_URL     the console's sign-in page                      (required)
//   TOKEN           a host token with access to PROJECT only         (required)
//   PROVIDER_URL    the Umami-compatible provider (its /api/send)     (required)
//   PROJECT         the project the token reaches; not set up yet     (required)
//   EVENTS          how many page views to send                       [2]
//   SCREENSHOT_DIR  where panel-<width>.png go               [target/browser]
//   CHROMIUM        the browser binary                   [/usr/bin/chromium]
//
// Exits 0 when every check passed, 1 with one line saying which failed.

import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { STEP_TIMEOUT_MS, audit, check, launchChromium, log, required, watchProblems } from "./support.mjs";

const BROWSER_UA =
  "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Safari/537.36";
const WIDTHS = [360, 768, 1280];
// The console's bounds for a panel's reported height (console.js).
const MIN_HEIGHT = 120;
const MAX_HEIGHT = 20000;

let step = "reading the environment";
const problems = [];
let browser;
let page;
const screenshotDir = process.env.SCREENSHOT_DIR || "target/browser";

/// Where the keyboard focus is: the page's focused element and, when that
/// is the panel's iframe, the focused element inside it.
async function focusedAt() {
  const describe = () => {
    const active = document.activeElement;
    const name = active ? active.tagName.toLowerCase() + (active.id ? `#${active.id}` : "") : "nothing";
    const text = active?.textContent?.trim().slice(0, 20);
    return { name: text ? `${name} "${text}"` : name, focused: document.hasFocus() };
  };
  const outer = await page.evaluate(describe);
  const frame = page.frames().find((f) => f !== page.mainFrame());
  const inner = outer.name.startsWith("iframe") && frame ? await frame.evaluate(describe) : null;
  return inner ? `${outer.name} > ${inner.name}${inner.focused ? "" : " (frame not focused)"}` : outer.name;
}

/// Waits until the focus has moved away from `before` and stayed for two
/// readings in a row (at most a second). Focus that crosses into or out of
/// the panel's out-of-process iframe arrives asynchronously: a Tab pressed
/// while it is still in transit can leave chromium's focused frame and the
/// page disagreeing, after which no further Tab leaves the iframe. A person
/// pressing Tab never presses within that window; the test paces itself the
/// same way.
async function focusSettled(before) {
  let last = null;
  const started = Date.now();
  while (Date.now() - started < 1000) {
    const now = await focusedAt();
    if (now !== before && now === last) {
      return now;
    }
    last = now;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return last;
}

/// Presses Tab (Shift+Tab when `backward`, at most 40 times) until the
/// focused element matches `selector`, in the panel's frame when `frame` is
/// given (the page's focus is then on the iframe); then checks that the
/// focus is visible. Each press waits for the focus to settle first
/// (`focusSettled`); a failure lists where each press left it. An element
/// before the focus is reached backward, as a person would: going forward
/// past the page's end, chromium moves the focus through its own (hidden)
/// toolbar, anywhere from 1 to over 20 presses before the page has it back.
async function tabTo(selector, frame, backward = false) {
  const path = [];
  let at = await focusedAt();
  for (let presses = 1; presses <= 40; presses++) {
    await page.keyboard.press(backward ? "Shift+Tab" : "Tab");
    at = await focusSettled(at);
    path.push(at);
    const inPage = await page.evaluate((sel) => !!document.activeElement?.matches(sel), frame ? "iframe.panel" : selector);
    const here = frame
      ? inPage && (await frame.evaluate((sel) => !!document.activeElement?.matches(sel), selector))
      : inPage;
    if (here) {
      await focusIsVisible(frame ?? page, selector);
      return presses;
    }
  }
  throw new Error(`40 presses of ${backward ? "Shift+Tab" : "Tab"} did not reach ${selector}; the focus went to: ${path.join(", ")}`);
}

/// The focused element shows the focus ring: it matches :focus-visible and
/// has a solid outline at least 2px wide.
async function focusIsVisible(target, what) {
  const focus = await target.evaluate(() => {
    const active = document.activeElement;
    const style = getComputedStyle(active);
    return {
      visible: active.matches(":focus-visible"),
      outline: `${style.outlineStyle} ${style.outlineWidth}`,
      width: Number.parseFloat(style.outlineWidth),
      style: style.outlineStyle,
    };
  });
  check(
    focus.visible && focus.style !== "none" && focus.width >= 2,
    `the focus on ${what} is not visible (:focus-visible ${focus.visible}, outline ${focus.outline})`,
  );
}

/// Audits `target` in the light and the dark color scheme.
async function auditBothSchemes(target, what) {
  for (const colorScheme of ["light", "dark"]) {
    await page.emulateMedia({ colorScheme });
    await audit(target, `${what} (${colorScheme})`);
  }
  await page.emulateMedia({ colorScheme: "light" });
  log(`axe-core: no serious or critical violation on ${what}, light and dark`);
}

/// The iframe's inner height and the panel document's measures, once the
/// iframe has followed the content (two equal readings in a row).
async function settledSize(iframe, frame) {
  let previous = null;
  const started = Date.now();
  while (Date.now() - started < STEP_TIMEOUT_MS) {
    const frameHeight = await iframe.evaluate((el) => el.clientHeight);
    const inside = await frame.evaluate(() => {
      const root = document.documentElement;
      return {
        content: Math.ceil(root.getBoundingClientRect().height),
        scrollHeight: root.scrollHeight,
        clientHeight: root.clientHeight,
        scrollWidth: root.scrollWidth,
        clientWidth: root.clientWidth,
      };
    });
    const size = { frameHeight, ...inside };
    if (
      Math.abs(frameHeight - inside.content) <= 1 &&
      previous &&
      JSON.stringify(previous) === JSON.stringify(size)
    ) {
      return size;
    }
    previous = size;
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
  throw new Error(`the iframe did not follow the panel's height: last ${JSON.stringify(previous)}`);
}

try {
  const consoleUrl = required("CONSOLE_URL");
  const token = required("TOKEN");
  const providerUrl = required("PROVIDER_URL").replace(/\/$/, "");
  const project = required("PROJECT");
  const events = Number.parseInt(process.env.EVENTS || "2", 10);
  const domain = `a11y-${Math.random().toString(36).slice(2, 8)}.example.com`;
  const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";
  check(events > 0, `EVENTS must be a positive number, not ${process.env.EVENTS}`);
  const origin = new URL(consoleUrl).origin;

  step = `launching ${executablePath}`;
  browser = await launchChromium(executablePath);
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin });
  page = await context.newPage();
  page.setDefaultTimeout(STEP_TIMEOUT_MS);
  watchProblems(page, problems);
  await page.emulateMedia({ colorScheme: "light", reducedMotion: "no-preference" });

  step = "auditing the sign-in page";
  await page.goto(consoleUrl);
  await page.locator("#token").waitFor();
  await auditBothSchemes(page, "the sign-in page");

  step = "signing in with a wrong token, by keyboard";
  await tabTo("#token");
  await page.keyboard.type("not-a-token");
  await Promise.all([page.waitForLoadState("load"), page.keyboard.press("Enter")]);
  await page.locator("#token-problem").waitFor();
  await auditBothSchemes(page, "the sign-in page with a problem");

  step = "signing in by keyboard";
  await tabTo("#token");
  await page.keyboard.type(token);
  await Promise.all([page.waitForURL(`**/console/projects/${project}`), page.keyboard.press("Enter")]);
  log(`signed in with Tab, the token and Enter; on ${new URL(page.url()).pathname}`);

  step = "waiting for the panel's setup form";
  const iframe = await page.locator("iframe.panel").elementHandle();
  const frame = await iframe.contentFrame();
  check(frame, "the panel iframe has no frame");
  await frame.locator("#site-form").waitFor();
  await auditBothSchemes(page, "the project page");
  await auditBothSchemes(frame, "the panel's setup form");
  const setup = await settledSize(iframe, frame);
  log(`the setup form is ${setup.content}px tall and so is its iframe`);

  step = "setting up the website by keyboard";
  await tabTo("#site-name", frame);
  await page.keyboard.type("Keyboard shop");
  await tabTo("#site-domain", frame);
  await page.keyboard.type(domain);
  await page.keyboard.press("Enter");
  const script = frame.locator("#tracking-script");
  await script.waitFor();
  const tag = (await script.textContent()).trim();
  const websiteId = tag.match(/data-website-id="([0-9a-f-]{36})"/)?.[1];
  check(websiteId, `the tracking script has no data-website-id: ${tag}`);
  await frame.waitForFunction(() => document.activeElement?.id === "edit-site");
  await focusIsVisible(frame, "the Edit button after saving");
  log(`set up ${domain} with Tab, typing and Enter; the focus moved to Edit, visibly`);

  step = "checking that the iframe grew with the dashboard";
  await frame.locator(".stats .card").first().waitFor();
  const dashboard = await settledSize(iframe, frame);
  check(
    dashboard.content > setup.content,
    `the dashboard (${dashboard.content}px) is not taller than the setup form (${setup.content}px)`,
  );
  log(`the iframe followed the content from ${setup.frameHeight}px to ${dashboard.frameHeight}px`);

  step = "copying the tracking script by keyboard";
  await tabTo(".script-actions button", frame);
  await page.keyboard.press("Enter");
  // The live region may still say "Saved. …" from the setup (it clears
  // after 6 s), and announcing empties it for 100 ms first so a repeated
  // message is read again: wait for "Copied" itself, not for any text.
  const announcement = frame.locator(".announcement");
  await frame
    .waitForFunction(() => document.querySelector(".announcement")?.textContent.trim() === "Copied", null, {
      timeout: 5000,
    })
    .catch(() => {});
  const said = (await announcement.textContent()).trim();
  check(said === "Copied", `after Copy the panel said "${said}", not "Copied"`);
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  check(copied === tag, `the clipboard holds ${JSON.stringify(copied)}, not the tracking script`);
  log(`Copy with Enter put the tracking script on the clipboard and said "${said}"`);

  step = `sending ${events} page views to ${providerUrl}/api/send`;
  for (let i = 0; i < events; i++) {
    const response = await fetch(`${providerUrl}/api/send`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "User-Agent": BROWSER_UA },
      body: JSON.stringify({
        type: "event",
        payload: { website: websiteId, hostname: domain, url: `/p-${i}`, title: "P", language: "en" },
      }),
    });
    check(response.ok, `/api/send answered ${response.status}: ${await response.text()}`);
  }

  step = "refreshing the statistics by keyboard";
  await tabTo(".stats .section-head button", frame, true);
  await page.keyboard.press("Enter");
  await frame.waitForFunction(
    (want) =>
      [...document.querySelectorAll(".stats .card")]
        .find((card) => card.querySelector("dt")?.textContent.trim() === "Page views")
        ?.querySelector("dd")
        ?.textContent.replace(/\D/g, "") === want,
    String(events),
  );
  log(`Refresh with Enter shows ${events} page views`);

  step = "reading the chart's table";
  const table = await frame.evaluate(() => {
    const rows = [...document.querySelectorAll(".stats table tbody tr")];
    return {
      caption: document.querySelector(".stats table caption")?.textContent.trim(),
      rows: rows.length,
      pageviews: rows.reduce((sum, row) => sum + Number(row.cells[1].textContent.replace(/\D/g, "")), 0),
      chartLabel: document.querySelector(".stats svg[role=img]")?.getAttribute("aria-label"),
    };
  });
  check(table.rows === 7, `the chart's table has ${table.rows} rows, not one per day of seven`);
  check(table.pageviews === events, `the chart's table sums to ${table.pageviews} page views, not ${events}`);
  check(table.chartLabel?.includes(`${events} page views in total`), `the chart's label: ${table.chartLabel}`);
  log(`the chart has a text alternative: "${table.caption}", 7 rows summing to ${events} page views`);
  await auditBothSchemes(frame, "the panel's dashboard with statistics");

  step = "opening the edit form by keyboard";
  await tabTo("#edit-site", frame, true);
  await page.keyboard.press("Enter");
  await frame.waitForFunction(() => document.activeElement?.id === "site-name");
  await focusIsVisible(frame, "the website name after Edit");
  await auditBothSchemes(frame, "the panel's edit form");
  await tabTo(".edit button[type=button]", frame);
  await page.keyboard.press("Enter");
  await frame.waitForFunction(() => document.activeElement?.id === "edit-site");
  log("Edit and Cancel work with Enter; the focus returns to Edit");

  step = "checking prefers-color-scheme and prefers-reduced-motion";
  const looks = async (query) => {
    await frame.waitForFunction((q) => matchMedia(q).matches, query, { timeout: 5000 }).catch(() => {
      throw new Error(`the panel's frame does not see ${query}`);
    });
    return frame.evaluate(() => {
      const spinner = document.createElement("span");
      spinner.className = "spinner";
      document.body.append(spinner);
      const animation = getComputedStyle(spinner).animationName;
      spinner.remove();
      const root = getComputedStyle(document.documentElement);
      return {
        background: getComputedStyle(document.body).backgroundColor,
        variable: root.getPropertyValue("--bg").trim(),
        sheets: document.styleSheets.length,
        animation,
      };
    });
  };
  await page.emulateMedia({ colorScheme: "light", reducedMotion: "no-preference" });
  const light = await looks("(prefers-color-scheme: light) and (prefers-reduced-motion: no-preference)");
  await page.emulateMedia({ colorScheme: "dark", reducedMotion: "reduce" });
  const dark = await looks("(prefers-color-scheme: dark) and (prefers-reduced-motion: reduce)");
  await page.emulateMedia({ colorScheme: "light", reducedMotion: "no-preference" });
  // The palette's variable, not body's computed background: chromium may
  // report a stale computed background for an emulated scheme in an
  // out-of-process frame while the variable has already changed.
  check(light.variable !== dark.variable, `the panel's --bg is the same in both schemes: ${JSON.stringify([light, dark])}`);
  check(light.animation === "spin", `the spinner does not turn normally (${light.animation})`);
  check(dark.animation === "none", `the spinner turns under prefers-reduced-motion (${dark.animation})`);
  log(`the panel's --bg is ${light.variable} light, ${dark.variable} dark; the spinner stops for reduced motion`);

  step = "checking the console's bounds for the reported height";
  const height = () => iframe.evaluate((el) => el.clientHeight);
  const before = await height();
  await frame.evaluate(() => parent.postMessage({ type: "platform.resize", height: 1e9 }, "*"));
  await page.waitForFunction((max) => document.querySelector("iframe.panel").clientHeight === max, MAX_HEIGHT);
  await frame.evaluate(() => parent.postMessage({ type: "platform.resize", height: 3 }, "*"));
  await page.waitForFunction((min) => document.querySelector("iframe.panel").clientHeight === min, MIN_HEIGHT);
  // Neither a report that is not a number nor one from another window moves it.
  await frame.evaluate(() => parent.postMessage({ type: "platform.resize", height: "900" }, "*"));
  await page.evaluate(() => window.postMessage({ type: "platform.resize", height: 900 }, "*"));
  await page.waitForTimeout(300);
  check((await height()) === MIN_HEIGHT, `the iframe took a height from a bad report: ${await height()}px`);
  log(`reports are clamped to ${MIN_HEIGHT}..${MAX_HEIGHT}px; text and other windows' reports are ignored (was ${before}px)`);

  step = "sizing the panel at three widths";
  mkdirSync(screenshotDir, { recursive: true });
  const heights = {};
  for (const width of WIDTHS) {
    await page.setViewportSize({ width, height: 900 });
    const size = await settledSize(iframe, frame);
    check(
      size.scrollHeight <= size.clientHeight,
      `at ${width}px the panel scrolls inside its frame (scrollHeight ${size.scrollHeight} > clientHeight ${size.clientHeight})`,
    );
    check(
      size.scrollWidth <= size.clientWidth,
      `at ${width}px the panel is wider than its frame (scrollWidth ${size.scrollWidth} > clientWidth ${size.clientWidth})`,
    );
    const pageWidth = await page.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
    check(pageWidth[0] <= pageWidth[1], `at ${width}px the console page scrolls sideways (${pageWidth.join(" > ")})`);
    const path = join(screenshotDir, `panel-${width}.png`);
    // A viewport as tall as the page rather than `fullPage`: chromium leaves
    // the out-of-process frame unpainted in a full-page capture.
    const pageHeight = await page.evaluate(() => document.documentElement.scrollHeight);
    await page.setViewportSize({ width, height: pageHeight });
    await settledSize(iframe, frame);
    await page.waitForTimeout(300);
    await page.screenshot({ path });
    heights[width] = size.frameHeight;
    log(`${width}px: iframe ${size.frameHeight}px for ${size.content}px of content, no inner scrollbar; ${path}`);
  }
  check(
    heights[360] > heights[1280],
    `the narrow panel (${heights[360]}px) is not taller than the wide one (${heights[1280]}px)`,
  );

  step = "auditing the projects page, reached by keyboard";
  await Promise.all([page.waitForURL(/\/console$/), tabTo("a.home", undefined, true).then(() => page.keyboard.press("Enter"))]);
  await page.locator("ul.projects").waitFor();
  await auditBothSchemes(page, "the projects page");

  step = "auditing the problem page";
  await page.goto(`${origin}/console/projects/no-such-project`);
  await page.locator("main [role=alert]").waitFor();
  await auditBothSchemes(page, "the problem page");

  step = "signing out by keyboard";
  await Promise.all([page.waitForURL(/\/console$/), tabTo("main a").then(() => page.keyboard.press("Enter"))]);
  await Promise.all([page.waitForURL(/\/console$/), tabTo(".bar button[type=submit]").then(() => page.keyboard.press("Enter"))]);
  await page.locator("#token").waitFor();
  log("signed out with Tab and Enter");

  check(problems.length === 0, `the page reported errors:\n    ${problems.join("\n    ")}`);
  await browser.close();
  console.log("accessibility test passed");
} catch (error) {
  console.error(`accessibility test failed while ${step}: ${error.message}`);
  for (const problem of problems) {
    console.error(`  ${problem}`);
  }
  if (page) {
    const path = join(screenshotDir, "accessibility-failure.png");
    try {
      mkdirSync(screenshotDir, { recursive: true });
      await page.screenshot({ path, fullPage: true });
      console.error(`  screenshot of the failure: ${path}`);
    } catch {}
  }
  await browser?.close().catch(() => {});
  process.exit(1);
}
