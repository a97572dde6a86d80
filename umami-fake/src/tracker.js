/* umami-fake tracker: a small stand-in for Umami's script.js.
 * Reads data-website-id, data-domains and data-host-url from its own tag and
 * posts page views to {data-host-url or the script's origin}/api/send. */
(function () {
  'use strict';
  var script = document.currentScript;
  if (!script) return;
  var website = script.getAttribute('data-website-id');
  if (!website) return;
  var hostUrl = script.getAttribute('data-host-url') || new URL(script.src, location.href).origin;
  var endpoint = hostUrl.replace(/\/+$/, '') + '/api/send';
  var domains = (script.getAttribute('data-domains') || '')
    .split(',')
    .map(function (d) { return d.trim().toLowerCase(); })
    .filter(Boolean);

  function allowed() {
    return domains.length === 0 || domains.indexOf(location.hostname.toLowerCase()) !== -1;
  }

  function send(payload) {
    if (!allowed()) return Promise.resolve();
    var body = JSON.stringify({ type: 'event', payload: payload });
    return fetch(endpoint, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: body,
      keepalive: true,
      credentials: 'omit'
    }).catch(function () {});
  }

  function pageview() {
    return send({
      website: website,
      hostname: location.hostname,
      url: location.pathname + location.search,
      referrer: document.referrer,
      title: document.title,
      language: navigator.language,
      screen: screen.width + 'x' + screen.height
    });
  }

  var lastUrl = location.href;
  function onNavigate() {
    if (location.href === lastUrl) return;
    lastUrl = location.href;
    pageview();
  }
  ['pushState', 'replaceState'].forEach(function (name) {
    var original = history[name];
    history[name] = function () {
      var result = original.apply(this, arguments);
      onNavigate();
      return result;
    };
  });
  window.addEventListener('popstate', onNavigate);

  window.umami = { track: pageview };
  if (document.readyState === 'complete') {
    pageview();
  } else {
    window.addEventListener('load', pageview);
  }
})();
