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
// status allows), and fires `portal:version-status` on document.body for anything else.
(function () {
  "use strict";
  var holder = document.querySelector("[data-live-events]");
  if (!holder || typeof WebSocket === "undefined") return;
  function apply(event) {
    document.querySelectorAll('[data-version-status="' + event.version + '"]').forEach(function (el) {
      el.textContent = event.to;
      Array.from(el.classList).forEach(function (c) { if (c.indexOf("state-") === 0) el.classList.remove(c); });
      el.classList.add("state-" + event.to);
    });
    refreshParts();
    document.body.dispatchEvent(new CustomEvent("portal:version-status", { detail: event }));
  }
  // One request for the page, then every part that asked for it swapped from the answer.
  function refreshParts() {
    var parts = document.querySelectorAll("[data-refresh-on-status][id]");
    if (!parts.length) return;
    fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        parts.forEach(function (el) {
          var next = fresh.getElementById(el.id);
          if (!next) return;
          var adopted = document.importNode(next, true);
          el.replaceWith(adopted);
          if (window.htmx) htmx.process(adopted);
        });
      })
      .catch(function () { /* the next event or a reload shows it */ });
  }
  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + holder.dataset.liveEvents);
    socket.addEventListener("message", function (e) {
      var event = JSON.parse(e.data);
      if (event.kind === "version.status") apply(event);
    });
    socket.addEventListener("close", function (e) {
      if (e.code >= 4400 && e.code < 4500) return; // refused or revoked: do not knock again
      setTimeout(connect, 3000);
    });
  }
  connect();
})();
