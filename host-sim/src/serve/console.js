// The console's side of the panel handshake (see console.rs).
//
// A panel posts {"type":"platform.ready"} when it starts and
// {"type":"platform.session-expired"} when its token stops working; the
// console answers with a fresh project-scoped session. The panel's iframe
// is sandboxed without allow-same-origin, so its origin is opaque and the
// target origin of postMessage has to be "*"; messages are accepted only
// from that iframe's own window.
//
// A panel also posts {"type":"platform.resize","height":N} with its
// content's height in CSS pixels; the console sizes the iframe to it,
// within [MIN_HEIGHT, MAX_HEIGHT], so the panel never scrolls inside.

const MIN_HEIGHT = 120;
const MAX_HEIGHT = 20000;

/// The iframe height for a reported content height, or null for a report
/// that is not a number.
function frameHeight(reported) {
  if (typeof reported !== "number" || !Number.isFinite(reported)) {
    return null;
  }
  return Math.min(MAX_HEIGHT, Math.max(MIN_HEIGHT, Math.ceil(reported)));
}

for (const frame of document.querySelectorAll("iframe[data-session-url]")) {
  const problem = frame.parentElement.querySelector(".panel-problem");
  const show = (text) => {
    if (problem) {
      problem.textContent = text;
      problem.hidden = !text;
    }
  };

  async function handSession() {
    let response;
    try {
      response = await fetch(frame.dataset.sessionUrl, {
        method: "POST",
        credentials: "same-origin",
        cache: "no-store",
      });
    } catch {
      show("The console could not reach the host. Reload the page to try again.");
      return;
    }
    if (response.status === 401) {
      window.location.assign("/console");
      return;
    }
    if (!response.ok) {
      let message = `The host answered ${response.status}.`;
      try {
        message = (await response.json()).error.message;
      } catch {}
      show(message);
      return;
    }
    show("");
    const session = await response.json();
    frame.contentWindow.postMessage({ type: "platform.session", ...session }, "*");
  }

  window.addEventListener("message", (event) => {
    if (event.source !== frame.contentWindow || !event.data) {
      return;
    }
    switch (event.data.type) {
      case "platform.ready":
      case "platform.session-expired":
        handSession();
        break;
      case "platform.resize": {
        const height = frameHeight(event.data.height);
        if (height !== null) {
          frame.style.height = `${height}px`;
        }
        break;
      }
      case "platform.reload":
        // A new document asks for a new session with the new generation.
        frame.src = frame.src;
        break;
    }
  });
}
