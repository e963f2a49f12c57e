// Page fragments answer a refused action with its 4xx status and the error in the fragment;
// inside [data-htmx-swap-errors], swap those in (htmx 2 does not swap 4xx responses by default).
document.addEventListener("htmx:beforeSwap", function (event) {
  var status = event.detail.xhr.status;
  if (status >= 400 && status < 500 && event.detail.elt.closest("[data-htmx-swap-errors]")) {
    event.detail.shouldSwap = true;
    event.detail.isError = false;
  }
});

// Lifecycle events, live: an element with data-live-events="<socket path>" (the tenant's events
// socket, portal.consumers.TenantEventsConsumer) keeps every [data-version-status="name@N"] on the
// page current, refreshes [data-refresh-on-status] parts from the server (the actions a new
// status allows), and fires `portal:version-status` on document.body for anything else. An eval
// run's progress (`eval.progress`) and a release plan's judgement or decision (`release.plan`)
// refresh the same parts, at most once a second.
// Whenever the socket opens (first, or again after a drop) the page is brought up to date from
// the server: a change made before the socket joined, or while it was away, sends no event to it.
(function () {
  "use strict";
  var holder = document.querySelector("[data-live-events]");
  if (!holder || typeof WebSocket === "undefined") return;
  function setStatus(version, to) {
    var changed = false;
    document.querySelectorAll('[data-version-status="' + version + '"]').forEach(function (el) {
      if (el.textContent === to) return;
      changed = true;
      el.textContent = to;
      Array.from(el.classList).forEach(function (c) { if (c.indexOf("state-") === 0) el.classList.remove(c); });
      el.classList.add("state-" + to);
    });
    if (changed) {
      document.body.dispatchEvent(new CustomEvent("portal:version-status", { detail: { version: version, to: to } }));
    }
  }
  // Forms carry a fresh CSRF token on every render: not a difference worth a swap.
  function comparable(el) {
    return el.innerHTML.replace(/name="csrfmiddlewaretoken" value="[^"]*"/g, "");
  }
  // One request for the page; every status and every part that asked for it taken from the
  // answer. Answers that come back out of order: only the newest asked is applied.
  var asked = 0;
  function sync() {
    var mine = ++asked;
    fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        if (mine !== asked) return;
        var fresh = new DOMParser().parseFromString(html, "text/html");
        fresh.querySelectorAll("[data-version-status]").forEach(function (el) {
          setStatus(el.dataset.versionStatus, el.textContent);
        });
        document.querySelectorAll("[data-refresh-on-status][id]").forEach(function (el) {
          var next = fresh.getElementById(el.id);
          if (!next || comparable(next) === comparable(el)) return;
          var adopted = document.importNode(next, true);
          el.replaceWith(adopted);
          if (window.htmx) htmx.process(adopted);
        });
      })
      .catch(function () { /* the next event, reconnect or reload shows it */ });
  }
  // An eval run reports every case: refresh its parts at most once a second, not per case.
  var waiting = null;
  function soon() {
    if (waiting !== null) return;
    waiting = setTimeout(function () { waiting = null; sync(); }, 1000);
  }
  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + holder.dataset.liveEvents);
    socket.addEventListener("open", sync);
    socket.addEventListener("message", function (e) {
      var event = JSON.parse(e.data);
      if (event.kind === "eval.progress" || event.kind === "release.plan") { soon(); return; }
      if (event.kind !== "version.status") return;
      setStatus(event.version, event.to);
      sync();
    });
    socket.addEventListener("close", function (e) {
      if (e.code >= 4400 && e.code < 4500) return; // refused or revoked: do not knock again
      setTimeout(connect, 3000);
    });
  }
  connect();
})();
