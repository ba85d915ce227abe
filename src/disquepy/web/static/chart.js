// A small line chart on a <canvas>: a few series sharing one time axis.
// LineChart(canvas, [{name, color}], windowSeconds, unit), .add(t, [v1, v2...]) then
// .draw(), or .push(t, values) for both. A null value is a gap. No library.
"use strict";

class LineChart {
  constructor(canvas, series, windowSeconds, unit) {
    this.canvas = canvas;
    this.series = series;
    this.window = windowSeconds || 300;
    this.unit = unit || "";
    this.points = []; // [t (seconds), [values]]
    window.addEventListener("resize", () => this.draw());
  }

  add(t, values) {
    if (this.points.length && t <= this.points[this.points.length - 1][0]) return;
    this.points.push([t, values]);
    const from = t - this.window;
    while (this.points.length && this.points[0][0] < from) this.points.shift();
  }

  push(t, values) {
    this.add(t, values);
    this.draw();
  }

  // the top of the y axis: four grid steps of a round size (1, 2, 5 x 10^n; 25 x 10^n
  // from 25 up), whole jobs per second at least
  static niceMax(v) {
    const step = v / 4;
    if (step <= 1) return 4;
    const p = Math.pow(10, Math.floor(Math.log10(step)));
    const ms = p >= 10 ? [1, 2, 2.5, 5, 10] : [1, 2, 5, 10];
    for (const m of ms) if (m * p >= step) return 4 * m * p;
    return 40 * p;
  }

  static fmt(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(v >= 1e7 ? 0 : 1) + "M";
    if (v >= 1e3) return (v / 1e3).toFixed(v >= 1e4 ? 0 : 1) + "k";
    return String(Math.round(v * 10) / 10);
  }

  draw() {
    const c = this.canvas, dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth, h = c.clientHeight || 180;
    if (!w) return;
    c.width = w * dpr; c.height = h * dpr;
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const L = 48, R = 12, T = 10, B = 24, pw = w - L - R, ph = h - T - B;
    const now = Math.max(Date.now() / 1000, this.points.length ? this.points[this.points.length - 1][0] : 0);
    // the time shown: the history there is, from one minute up to the window
    const span = this.points.length ? now - this.points[0][0] : 0;
    const win = Math.min(this.window, Math.max(60, Math.ceil(span / 60) * 60));
    let max = 0;
    for (const [, vs] of this.points) for (const v of vs) if (v != null && v > max) max = v;
    max = LineChart.niceMax(max * 1.1);
    g.font = "11px -apple-system, Segoe UI, Roboto, sans-serif";
    g.fillStyle = "#6b7280"; g.strokeStyle = "#eef0f3"; g.lineWidth = 1;
    g.textAlign = "right"; g.textBaseline = "middle";
    for (let i = 0; i <= 4; i++) {
      const y = T + ph - (ph * i) / 4;
      g.beginPath(); g.moveTo(L, Math.round(y) + 0.5); g.lineTo(L + pw, Math.round(y) + 0.5); g.stroke();
      g.fillText(LineChart.fmt((max * i) / 4) + (i === 4 && this.unit ? " " + this.unit : ""), L - 8, y);
    }
    g.textAlign = "center"; g.textBaseline = "top";
    const step = [10, 15, 30, 60, 120, 180, 300, 600].find((x) => win / x <= 6) || 900;
    for (let s = 0; s <= win; s += step) {
      const x = L + pw - (pw * s) / win;
      g.fillText(s === 0 ? "now" : s < 60 ? `-${s}s` : `-${s / 60}m`, x, T + ph + 6);
    }
    const xOf = (t) => L + pw - (pw * (now - t)) / win;
    const yOf = (v) => T + ph - (ph * v) / max;
    this.series.forEach((s, k) => {
      // runs of points with a value; a null (or a hole in the samples) breaks the line
      const runs = [];
      let run = [], prevT = null;
      for (const [t, vs] of this.points) {
        const gap = prevT != null && t - prevT > 30;
        if (vs[k] == null || gap) { if (run.length) runs.push(run); run = []; }
        if (vs[k] != null) run.push([t, vs[k]]);
        prevT = t;
      }
      if (run.length) runs.push(run);
      for (const pts of runs) {
        g.beginPath();
        pts.forEach(([t, v], i) => (i ? g.lineTo(xOf(t), yOf(v)) : g.moveTo(xOf(t), yOf(v))));
        g.strokeStyle = s.color; g.lineWidth = 2; g.lineJoin = "round"; g.stroke();
        if (pts.length > 1) {
          g.lineTo(xOf(pts[pts.length - 1][0]), T + ph); g.lineTo(xOf(pts[0][0]), T + ph); g.closePath();
          g.globalAlpha = 0.06; g.fillStyle = s.color; g.fill(); g.globalAlpha = 1;
        }
      }
    });
    if (!this.points.length) {
      g.fillStyle = "#9ca3af"; g.textAlign = "center"; g.textBaseline = "middle";
      g.fillText("collecting samples…", L + pw / 2, T + ph / 2);
    }
  }
}
window.LineChart = LineChart;
