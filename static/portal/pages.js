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
      el.className = el.className.replace(/\bstate-\S+/g, "").trim() + " state-" + event.to;
    });
    if (window.htmx) {
      document.querySelectorAll("[data-refresh-on-status][id]").forEach(function (el) {
        htmx.ajax("GET", location.href, { target: "#" + el.id, select: "#" + el.id, swap: "outerHTML" });
      });
    }
    document.body.dispatchEvent(new CustomEvent("portal:version-status", { detail: event }));
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
