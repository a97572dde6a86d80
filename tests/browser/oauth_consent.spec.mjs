// An MCP client connects through OAuth the way a person meets it in a real
// browser: the client registers (RFC 7591) with a loopback redirect URI, the
// person opens its authorization request, signs in to the console, sees the
// consent page (the client's name and redirect host, their projects, the
// scopes asked for), narrows it to one project and the read scope, and
// allows; the client's callback gets the code with `state` and `iss`, the
// code and PKCE verifier buy an audience-bound token that reaches `/mcp` for
// that project only. "Connected apps" then lists the client with its project
// and scope, and disconnecting it ends the token. A second request, denied,
// sends the client `access_denied`. Both pages pass axe-core.
//
// Run by `cargo test -p workspace-tests --test browser` (tests/browser.rs),
// which starts the provider fake and `host-sim serve`.
//
// Environment:
//   BASE_URL       the server's origin, e.g. http://127.0.0.1:8080   (required)
//   TOKEN          the person's console token                        (required)
//   PROJECT        the project the person consents to                (required)
//   OTHER_PROJECT  a project of theirs the app is not given          (required)
//   CHROMIUM       the browser binary                   [/usr/bin/chromium]
//
// Exits 0 when every check passed, 1 with one line saying which failed.

import { createHash, randomBytes } from "node:crypto";
import { createServer } from "node:http";
import { STEP_TIMEOUT_MS, audit, check, launchChromium, log, required, watchProblems } from "./support.mjs";

const CLIENT_NAME = "Browser assistant";
const STATS = "plugin__managed_analytics__stats";

let step = "reading the environment";
const problems = [];
let browser;
let callbackServer;

/// A loopback "client" that records the query of every callback it gets.
function startCallback() {
  const received = [];
  const waiting = [];
  const server = createServer((request, response) => {
    const url = new URL(request.url, "http://127.0.0.1");
    // Only the callback counts (not the browser's /favicon.ico).
    if (url.pathname === "/callback") {
      received.push(url.searchParams);
      waiting.splice(0).forEach((wake) => wake());
    }
    response.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    response.end("<!doctype html><html lang=en><title>Callback</title><p>You can close this tab.</p></html>");
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const next = async () => {
        const deadline = Date.now() + STEP_TIMEOUT_MS;
        while (received.length === 0) {
          check(Date.now() < deadline, "the client's callback was never called");
          await new Promise((wake) => {
            waiting.push(wake);
            setTimeout(wake, 200);
          });
        }
        return received.shift();
      };
      resolve({ server, uri: `http://127.0.0.1:${server.address().port}/callback`, next });
    });
  });
}

const base64url = (bytes) => Buffer.from(bytes).toString("base64url");

function pkce() {
  const verifier = base64url(randomBytes(32));
  return { verifier, challenge: base64url(createHash("sha256").update(verifier).digest()) };
}

async function mcp(baseUrl, token, message) {
  return fetch(`${baseUrl}/mcp`, {
    method: "POST",
    headers: {
      accept: "application/json, text/event-stream",
      "content-type": "application/json",
      authorization: `Bearer ${token}`,
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, ...message }),
  });
}

try {
  const baseUrl = required("BASE_URL").replace(/\/$/, "");
  const token = required("TOKEN");
  const project = required("PROJECT");
  const otherProject = required("OTHER_PROJECT");
  const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";

  step = "starting the client's loopback callback";
  const callback = await startCallback();
  callbackServer = callback.server;

  step = "registering the client";
  const registered = await fetch(`${baseUrl}/oauth/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      client_name: CLIENT_NAME,
      redirect_uris: [callback.uri],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    }),
  });
  check(registered.status === 201, `registration answered ${registered.status}`);
  const clientId = (await registered.json()).client_id;
  log(`registered ${CLIENT_NAME} with redirect URI ${callback.uri}`);

  const authorizeUrl = (challenge, state) =>
    `${baseUrl}/console/authorize?${new URLSearchParams({
      response_type: "code",
      client_id: clientId,
      redirect_uri: callback.uri,
      state,
      scope: "read write",
      code_challenge: challenge,
      code_challenge_method: "S256",
      resource: `${baseUrl}/mcp`,
    })}`;

  step = `launching ${executablePath}`;
  browser = await launchChromium(executablePath);
  const page = await (await browser.newContext({ viewport: { width: 1000, height: 900 } })).newPage();
  page.setDefaultTimeout(STEP_TIMEOUT_MS);
  watchProblems(page, problems);

  step = "opening the authorization request signed out";
  const first = pkce();
  await page.goto(authorizeUrl(first.challenge, "state-allow"));
  await page.locator("#token").waitFor();
  const signInText = await page.locator("main").innerText();
  check(
    signInText.includes(`Sign in to authorize ${CLIENT_NAME}.`),
    `the sign-in page does not say which app asks: ${signInText}`,
  );
  log("signed out, the request asks for a sign-in naming the app");

  step = "signing in from the authorization request";
  await page.locator("#token").fill(token);
  await Promise.all([
    page.waitForURL("**/console/authorize?**"),
    page.locator('form[action="/console/sign-in"] button[type="submit"]').click(),
  ]);
  await page.locator("main.consent").waitFor();

  step = "reading the consent page";
  const heading = await page.locator("h1").innerText();
  check(heading === `Authorize ${CLIENT_NAME}`, `the consent page's heading is ${JSON.stringify(heading)}`);
  const consentText = await page.locator("main").innerText();
  const redirectHost = new URL(callback.uri).host;
  check(consentText.includes(redirectHost), `the consent page does not name the redirect host ${redirectHost}`);
  check(!(await page.content()).includes(token), "the consent page's HTML contains the person's token");
  const projectBox = page.getByRole("checkbox", { name: project, exact: true });
  const otherBox = page.getByRole("checkbox", { name: otherProject, exact: true });
  check(!(await projectBox.isChecked()) && !(await otherBox.isChecked()), "a project is pre-selected");
  const readBox = page.getByRole("checkbox", { name: /^read\b/ });
  const writeBox = page.getByRole("checkbox", { name: /^write\b/ });
  check(
    (await readBox.isChecked()) && (await writeBox.isChecked()),
    "the scopes the app asked for (read write) are not pre-selected",
  );
  await audit(page, "the consent page");
  log(`consent page: "${heading}", back to ${redirectHost}, projects ${project} and ${otherProject} unticked, read and write ticked, axe clean`);

  step = "allowing one project with the read scope";
  await projectBox.check();
  await writeBox.uncheck();
  await Promise.all([
    page.waitForURL(`${callback.uri}?**`),
    page.getByRole("button", { name: "Allow" }).click(),
  ]);
  const allowed = await callback.next();
  check(allowed.get("state") === "state-allow", `the callback's state is ${allowed.get("state")}`);
  check(allowed.get("iss") === `${baseUrl}/`, `the callback's iss is ${allowed.get("iss")}`);
  const code = allowed.get("code");
  check(code && !allowed.get("error"), `the callback has no code: ${allowed}`);
  log("Allow sent the client a code with its state and iss");

  step = "exchanging the code";
  const exchanged = await fetch(`${baseUrl}/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code",
      code,
      redirect_uri: callback.uri,
      client_id: clientId,
      code_verifier: first.verifier,
      resource: `${baseUrl}/mcp`,
    }),
  });
  const tokens = await exchanged.json();
  check(exchanged.status === 200, `the token endpoint answered ${exchanged.status}: ${tokens.error}`);
  check(tokens.scope === "read", `the token's scope is ${JSON.stringify(tokens.scope)}, not "read"`);
  const accessToken = tokens.access_token;

  step = "using the token on /mcp";
  const listed = await mcp(baseUrl, accessToken, { method: "tools/list", params: {} });
  check(listed.status === 200, `tools/list answered ${listed.status}`);
  const names = (await listed.json()).result.tools.map((tool) => tool.name);
  check(names.includes(STATS), `the tools do not include ${STATS}: ${names}`);
  const refused = await (
    await mcp(baseUrl, accessToken, {
      method: "tools/call",
      params: { name: STATS, arguments: { project_id: otherProject, start_at: 0, end_at: 1 } },
    })
  ).json();
  check(
    (refused.result?.isError === true || refused.error) && JSON.stringify(refused).includes(otherProject),
    `a call for ${otherProject}, not consented, was not refused naming it: ${JSON.stringify(refused)}`,
  );
  log(`the token lists the tools and is refused for ${otherProject}`);

  step = "opening Connected apps";
  await page.goto(`${baseUrl}/console/apps`);
  const row = page.locator("table.apps tbody tr", { hasText: CLIENT_NAME });
  await row.waitFor();
  const rowText = await row.innerText();
  check(rowText.includes(redirectHost), `the app's row does not name ${redirectHost}: ${rowText}`);
  check(rowText.includes(project) && !rowText.includes(otherProject), `the app's projects are wrong: ${rowText}`);
  check(/\bread\b/.test(rowText) && !/\bwrite\b/.test(rowText), `the app's scopes are wrong: ${rowText}`);
  await audit(page, "Connected apps");
  log(`Connected apps lists ${CLIENT_NAME}: ${rowText.replace(/\s+/g, " ").trim()}; axe clean`);

  step = "disconnecting the app";
  await Promise.all([
    page.waitForURL("**/console/apps"),
    page.getByRole("button", { name: `Disconnect ${CLIENT_NAME}` }).click(),
  ]);
  await page.getByText("No app is connected").waitFor();
  const after = await mcp(baseUrl, accessToken, { method: "tools/list", params: {} });
  check(after.status === 401, `after disconnecting, the token answered ${after.status}, not 401`);
  log("disconnected: the list is empty and the token answers 401");

  step = "denying a second request";
  const second = pkce();
  await page.goto(authorizeUrl(second.challenge, "state-deny"));
  await page.locator("main.consent").waitFor();
  await Promise.all([
    page.waitForURL(`${callback.uri}?**`),
    page.getByRole("button", { name: "Deny" }).click(),
  ]);
  const denied = await callback.next();
  check(denied.get("error") === "access_denied", `Deny sent error ${denied.get("error")}`);
  check(denied.get("state") === "state-deny" && !denied.get("code"), `Deny's callback: ${denied}`);
  log("Deny sent the client access_denied with its state and no code");

  check(problems.length === 0, `the browser saw problems:\n    ${problems.join("\n    ")}`);
  console.log("oauth consent: every check passed");
} catch (error) {
  console.error(`FAILED while ${step}: ${error.message}`);
  process.exitCode = 1;
} finally {
  await browser?.close();
  callbackServer?.close();
}
