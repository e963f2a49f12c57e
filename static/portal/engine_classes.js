// The engine page's queue by service class, live: [data-live-classes="<engine>"] keeps each
// [data-class-slots="<class>"] cell at the slots the class holds on that engine now, from the
// fleet socket's messages (portal.live_series.fleet_payload: `classes`, engine -> class -> slots,
// every gateway replica's), once a second. A class that holds nothing is shown 0.
(function () {
  "use strict";

  function Classes(section) {
    this.section = section;
    this.engine = section.dataset.liveClasses;
    this.state = section.querySelector("[data-live-state]");
    this.connect();
  }

  Classes.prototype.receive = function (message) {
    if (!message.classes) return;
    var held = message.classes[this.engine] || {};
    this.section.querySelectorAll("[data-class-slots]").forEach(function (cell) {
      cell.textContent = String(held[cell.dataset.classSlots] || 0);
    });
  };

  Classes.prototype.connect = function () {
    var self = this;
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    // `since`: the socket first sends a catch-up message, which carries the queue now.
    var url = this.section.dataset.socket + "?since=" + Math.floor(Date.now() / 1000 - 2);
    var socket = new WebSocket(scheme + location.host + url);
    socket.addEventListener("open", function () { self.state.textContent = "live"; });
    socket.addEventListener("message", function (e) { self.receive(JSON.parse(e.data)); });
    socket.addEventListener("close", function (e) {
      if (e.code === 4403 || e.code === 4404 || e.code === 4401) {
        self.state.textContent = "stopped: you no longer have access";
        return;
      }
      self.state.textContent = "reconnecting…";
      setTimeout(function () { self.connect(); }, 3000);
    });
  };

  function start() {
    document.querySelectorAll("[data-live-classes]").forEach(function (s) { new Classes(s); });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
