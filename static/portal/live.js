// Live charts: sections marked data-live-charts (templates/portal/_live_charts.html) draw the
// history the page embedded, then update in place from the metrics socket (portal.consumers),
// which first sends the seconds the page missed when it (re)joins, then the last seconds' raw sums
// once a second. Ratios are derived here from sums, so seconds add up into the current minute
// exactly; a second sent again replaces the one we have. The engine page's queue by service class
// (data-live-classes) follows the fleet socket the same way (liveClasses below).
(function () {
  "use strict";
  if (window.portalLive) return; // the partial may be included twice on one page
  window.portalLive = true;

  var SECONDS_SHOWN = 120;
  var MINUTES_SHOWN = 60;

  function n(v) { return v || 0; }
  var DERIVED = {
    ttft: function (s) { return s.ttft_count ? s.ttft_ms_sum / s.ttft_count : null; },
    hit: function (s) {
      var tiers = n(s.gpu) + n(s.cpu) + n(s.cold);
      return tiers ? (n(s.gpu) + n(s.cpu)) / tiers : null;
    },
    load: function (s) { return s.cold && s.load_ms_sum ? s.load_ms_sum / s.cold : null; },
    requests: function (s) { return n(s.requests); },
    errors: function (s) { return n(s.errors); },
    cold: function (s) { return n(s.cold); },
    evictions: function (s) { return n(s.evictions); },
  };
  var CHARTS = {
    version: [
      { title: "Time to first token (ms)", series: [["TTFT", "ttft", "#2563eb"]] },
      { title: "Hit ratio (GPU or CPU cache)", series: [["hit ratio", "hit", "#16a34a"]], range: [0, 1] },
      { title: "Load latency of cold requests (ms)", series: [["load", "load", "#b54708"]] },
      { title: "Requests", series: [["requests", "requests", "#475467"], ["errors", "errors", "#d92d20"]] },
    ],
    tenant: [
      { title: "Hit ratio (GPU or CPU cache)", series: [["hit ratio", "hit", "#16a34a"]], range: [0, 1] },
      { title: "Time to first token (ms)", series: [["TTFT", "ttft", "#2563eb"]] },
      { title: "Load latency of cold requests (ms)", series: [["load", "load", "#b54708"]] },
      { title: "Cold requests", series: [["cold", "cold", "#7a5af8"]] },
      { title: "Requests", series: [["requests", "requests", "#475467"], ["errors", "errors", "#d92d20"]] },
    ],
    fleet: [
      { title: "Fleet hit ratio", series: [["hit ratio", "hit", "#16a34a"]], range: [0, 1] },
      { title: "Load latency of cold requests (ms)", series: [["load", "load", "#b54708"]] },
      { title: "Time to first token (ms)", series: [["TTFT", "ttft", "#2563eb"]] },
      { title: "Cold requests and evictions", series: [["cold", "cold", "#7a5af8"], ["evictions", "evictions", "#d92d20"]] },
      { title: "Requests", series: [["requests", "requests", "#475467"], ["errors", "errors", "#d92d20"]] },
    ],
  };

  function addInto(into, more) {
    for (var k in more) into[k] = (into[k] || 0) + more[k];
    return into;
  }

  function Live(section) {
    this.section = section;
    this.kind = section.dataset.liveCharts;
    this.select = section.dataset.select;
    this.state = section.querySelector("[data-live-state]");
    var history = JSON.parse(document.getElementById(section.dataset.history).textContent);
    this.minutes = {}; // minute start -> sums (completed minutes at page load)
    this.seconds = {}; // second -> sums
    var self = this;
    history.minutes.forEach(function (p) { self.minutes[p.t] = p.sums; });
    history.seconds.forEach(function (p) { self.seconds[p.t] = p.sums; });
    var ts = history.seconds.map(function (p) { return p.t; });
    this.firstSecond = ts.length ? ts[0] : Math.floor(Date.now() / 1000);
    this.latest = ts.length ? ts[ts.length - 1] : this.firstSecond;
    this.charts = { minute: [], second: [] };
    ["minute", "second"].forEach(function (res) {
      var grid = section.querySelector('[data-resolution="' + res + '"]');
      CHARTS[self.kind].forEach(function (spec) { self.charts[res].push(self.makeChart(grid, spec)); });
    });
    this.draw();
    this.connect();
    window.addEventListener("resize", function () { self.resize(); });
  }

  Live.prototype.makeChart = function (grid, spec) {
    var box = document.createElement("div");
    box.className = "chart";
    grid.appendChild(box);
    var width = Math.max(220, box.clientWidth || 320);
    var opts = {
      title: spec.title,
      width: width,
      height: 160,
      scales: { x: { time: true }, y: spec.range ? { range: spec.range } : { auto: true } },
      series: [{}].concat(spec.series.map(function (s) {
        // Ratios and means have gaps (no requests): show each point, or a lone one is invisible.
        var gappy = s[1] === "ttft" || s[1] === "hit" || s[1] === "load";
        return { label: s[0], stroke: s[2], width: 1.5, spanGaps: false, points: { show: gappy, size: 4, fill: s[2] } };
      })),
      legend: { show: spec.series.length > 1 },
    };
    var empty = [[]].concat(spec.series.map(function () { return []; }));
    return { spec: spec, box: box, plot: new uPlot(opts, empty, box) };
  };

  // The sums of one period for this section: one version, or the fleet's totals.
  Live.prototype.pick = function (point) {
    if (this.kind === "fleet") return point.sums || {};
    var versions = point.versions || {};
    if (this.kind === "version") return versions[this.select] || {};
    var sums = {}; // the tenant: every version the socket passes on (a grantee's: the granted)
    for (var v in versions) addInto(sums, versions[v]);
    return sums;
  };

  Live.prototype.minuteSums = function (m) {
    var start = m * 60;
    if (start < this.firstSecond) return this.minutes[start] || {};
    var sums = {};
    for (var s = start; s < start + 60; s++) if (this.seconds[s]) addInto(sums, this.seconds[s]);
    return sums;
  };

  Live.prototype.series = function (res) {
    var xs = [], rows = [];
    if (res === "second") {
      for (var s = this.latest - SECONDS_SHOWN + 1; s <= this.latest; s++) {
        xs.push(s);
        rows.push(this.seconds[s] || {});
      }
    } else {
      var now = Math.floor(this.latest / 60);
      for (var m = now - MINUTES_SHOWN; m <= now; m++) {
        xs.push(m * 60);
        rows.push(this.minuteSums(m));
      }
    }
    return { xs: xs, rows: rows };
  };

  Live.prototype.draw = function () {
    var self = this, total = 0;
    ["minute", "second"].forEach(function (res) {
      var data = self.series(res);
      self.charts[res].forEach(function (chart) {
        var cols = [data.xs].concat(chart.spec.series.map(function (s) {
          return data.rows.map(DERIVED[s[1]]);
        }));
        chart.plot.setData(cols);
      });
      if (res === "second") data.rows.forEach(function (r) { total += n(r.requests); });
    });
    // What tests and people can read without the canvas: requests in the seconds shown.
    this.section.dataset.requestsShown = String(total);
    this.section.dataset.latest = String(this.latest);
  };

  Live.prototype.resize = function () {
    ["minute", "second"].forEach(function (res) {
      this.charts[res].forEach(function (c) { c.plot.setSize({ width: Math.max(220, c.box.clientWidth), height: 160 }); });
    }, this);
  };

  Live.prototype.receive = function (message) {
    var self = this;
    message.points.forEach(function (p) {
      self.seconds[p.t] = self.pick(p);
      if (p.t > self.latest) self.latest = p.t;
    });
    var oldest = this.latest - (MINUTES_SHOWN + 2) * 60;
    for (var t in this.seconds) if (+t < oldest) delete this.seconds[t];
    this.draw();
  };

  Live.prototype.connect = function () {
    var self = this;
    // `since`: the socket first sends every second after it (LiveNumbersSocket.send_catch_up in
    // portal/consumers.py), so what was recorded before it joined, or while it was reconnecting,
    // is drawn too. A few seconds before the last one we have: it may have come while the
    // gateway's replicas were still writing it.
    liveSocket(
      function () { return self.section.dataset.socket + "?since=" + Math.max(0, self.latest - 3); },
      this.state,
      function (message) { self.receive(message); }
    );
  };

  // One live socket: "live" while open; a refusal (the user lost access) stops it; a drop
  // reconnects after 3 s, to the URL `path()` gives then.
  function liveSocket(path, state, receive) {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + path());
    socket.addEventListener("open", function () { state.textContent = "live"; });
    socket.addEventListener("message", function (e) { receive(JSON.parse(e.data)); });
    socket.addEventListener("close", function (e) {
      if (e.code === 4403 || e.code === 4404 || e.code === 4401) {
        state.textContent = "stopped: you no longer have access";
        return;
      }
      state.textContent = "reconnecting…";
      setTimeout(function () { liveSocket(path, state, receive); }, 3000);
    });
  }

  // The engine page's queue by service class: [data-live-classes="<engine>"] keeps each
  // [data-class-slots="<class>"] cell at the slots the class holds on that engine now, from the
  // fleet socket's messages (portal.live_series.fleet_payload: `classes`, engine -> class ->
  // slots, every gateway replica's), once a second; a class that holds nothing shows 0. The
  // catch-up message a joining socket gets first carries the queue too.
  function liveClasses(section) {
    var engine = section.dataset.liveClasses;
    liveSocket(
      function () { return section.dataset.socket + "?since=" + Math.floor(Date.now() / 1000 - 2); },
      section.querySelector("[data-live-state]"),
      function (message) {
        if (!message.classes) return;
        var held = message.classes[engine] || {};
        section.querySelectorAll("[data-class-slots]").forEach(function (cell) {
          cell.textContent = String(held[cell.dataset.classSlots] || 0);
        });
      }
    );
  }

  function start() {
    document.querySelectorAll("[data-live-classes]").forEach(liveClasses);
    if (typeof uPlot === "undefined") return;
    document.querySelectorAll("[data-live-charts]").forEach(function (section) { new Live(section); });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
