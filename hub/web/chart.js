// A line chart drawn as SVG through DOM APIs (createElementNS, setAttribute): no HTML strings,
// no library. Values that are not finite numbers (state is untrusted) are left out.

const SVG = "http://www.w3.org/2000/svg";

function node(tag, attrs = {}, parent = null) {
  const n = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) n.setAttribute(key, String(value));
  if (parent !== null) parent.append(n);
  return n;
}

export class LineChart {
  /** An empty chart in `container`; `slots` points fit across before the line scrolls. */
  constructor(container, { width = 640, height = 240, slots = 30, label = "chart" } = {}) {
    this.width = width;
    this.height = height;
    this.slots = slots;
    this.pad = { left: 36, right: 44, top: 14, bottom: 22 };
    this.svg = node("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img", "aria-label": label });
    this.svg.dataset.testid = "chart";
    this.grid = node("g", {}, this.svg);
    this.area = node("path", { class: "area" }, this.svg);
    this.line = node("polyline", { class: "line" }, this.svg);
    this.last = node("circle", { class: "last", r: 4, cx: -10, cy: -10 }, this.svg);
    this.lastLabel = node("text", { class: "last-label", x: -10, y: -10 }, this.svg);
    this.title = node("title", {}, this.svg);
    container.replaceChildren(this.svg);
    this.top = null;
  }

  _drawGrid(top) {
    if (this.top === top) return;
    this.top = top;
    this.grid.replaceChildren();
    const { left, right } = this.pad;
    for (let i = 0; i <= 4; i++) {
      const value = (top * i) / 4;
      const y = this._y(value);
      node("line", { class: "grid", x1: left, x2: this.width - right, y1: y, y2: y }, this.grid);
      const text = node("text", { class: "axis-label", x: left - 6, y: y + 4, "text-anchor": "end" }, this.grid);
      text.textContent = String(Math.round(value));
    }
  }

  _x(i) {
    const { left, right } = this.pad;
    return left + ((this.width - left - right) * i) / Math.max(1, this.slots - 1);
  }

  _y(value) {
    const { top, bottom } = this.pad;
    return this.height - bottom - ((this.height - top - bottom) * value) / this.top;
  }

  /** Draw `values` (the newest last). */
  update(values) {
    const points = (Array.isArray(values) ? values : []).filter((v) => typeof v === "number" && Number.isFinite(v));
    this.svg.dataset.values = points.join(",");
    this.svg.dataset.count = String(points.length);
    const peak = Math.max(100, ...points.map((v) => Math.abs(v)));
    this._drawGrid(Math.ceil(peak / 20) * 20);
    const shown = points.slice(-this.slots);
    const offset = this.slots - shown.length; // the newest point sits at the right edge
    const xy = shown.map((v, i) => [this._x(offset + i), this._y(Math.max(0, v))]);
    this.line.setAttribute("points", xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" "));
    if (xy.length === 0) {
      this.area.setAttribute("d", "");
      this.last.setAttribute("cx", "-10");
      this.lastLabel.textContent = "";
      this.title.textContent = "no data yet";
      return;
    }
    const base = this._y(0).toFixed(1);
    const [firstX] = xy[0];
    const [lastX, lastY] = xy[xy.length - 1];
    const path = xy.map(([x, y]) => `L${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
    this.area.setAttribute("d", `M${firstX.toFixed(1)},${base} ${path} L${lastX.toFixed(1)},${base} Z`);
    this.last.setAttribute("cx", lastX.toFixed(1));
    this.last.setAttribute("cy", lastY.toFixed(1));
    this.lastLabel.setAttribute("x", (lastX + 8).toFixed(1));
    this.lastLabel.setAttribute("y", (lastY + 4).toFixed(1));
    this.lastLabel.textContent = String(shown[shown.length - 1]);
    this.title.textContent = `${points.length} points, latest ${shown[shown.length - 1]}`;
  }
}
