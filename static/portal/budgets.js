// Burn-down charts of the budgets pages (templates/budgets): tokens left this window at each
// sample the alert loop kept, and the forecast from now to the moment it runs out. The page
// embeds each chart's series (budgets/page_selectors.py burn_down) as JSON.
(function () {
  "use strict";

  function short(v) {
    if (v >= 1e9) return (v / 1e9).toFixed(v % 1e9 ? 1 : 0) + "G";
    if (v >= 1e6) return (v / 1e6).toFixed(v % 1e6 ? 1 : 0) + "M";
    if (v >= 1e3) return (v / 1e3).toFixed(v % 1e3 ? 1 : 0) + "k";
    return String(v);
  }

  function draw(box) {
    var data = JSON.parse(document.getElementById(box.dataset.burnDown).textContent);
    var xs = {};
    data.left.forEach(function (p) { xs[p[0]] = true; });
    data.forecast.forEach(function (p) { xs[p[0]] = true; });
    var times = Object.keys(xs).map(Number).sort(function (a, b) { return a - b; });
    function at(points) {
      var byTime = {};
      points.forEach(function (p) { byTime[p[0]] = p[1]; });
      return times.map(function (t) { return t in byTime ? byTime[t] : null; });
    }
    var xMax = data.end || times[times.length - 1];
    if (data.forecast.length && data.forecast[1][0] > xMax) xMax = data.forecast[1][0];
    var opts = {
      width: Math.max(260, box.clientWidth || 420),
      height: 180,
      scales: {
        x: { time: true, range: function () { return [times[0], xMax]; } },
        y: { range: function () { return [0, data.limit]; } },
      },
      series: [
        {},
        { label: "left", stroke: "#2563eb", width: 2, fill: "rgba(37,99,235,.08)", spanGaps: true },
        { label: "forecast", stroke: "#b54708", width: 1.5, dash: [6, 4], spanGaps: true },
      ],
      axes: [{}, { size: 64, values: function (u, ticks) { return ticks.map(short); } }],
      legend: { show: true, live: false },
    };
    new uPlot(opts, [times, at(data.left), at(data.forecast)], box);
  }

  function start() {
    if (typeof uPlot === "undefined") return;
    document.querySelectorAll("[data-burn-down]").forEach(draw);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
