// The live dashboard: the agent's state as figures, a chart of its series that moves with every
// STATE_DELTA, and what the agent is saying. Read-only.

import { asText, byTestId, el, keepThreadInLinks, pageThread, renderMessages, startPage } from "./common.js";
import { LineChart } from "./chart.js";

const figureBox = byTestId("figures");
const messageList = byTestId("messages");
const seriesLength = byTestId("series-length");
const chart = new LineChart(byTestId("chart-box"), { label: "the agent's series" });

/** Figure name -> how to read it from the state (untrusted: anything may be missing). */
const FIGURES = [
  ["step", (s) => s.status?.step],
  ["phase", (s) => s.status?.phase],
  ["sections", (s) => (Array.isArray(s.sections) ? s.sections.length : undefined)],
  ["words", (s) => s.counters?.words],
  ["latest", (s) => lastNumber(s.series)],
  ["average", (s) => average(s.series)],
];
const figureValues = new Map();
for (const [name] of FIGURES) {
  const value = el("div", { className: name === "phase" ? "figure-value small" : "figure-value", text: "–" });
  figureBox.append(
    el(
      "div",
      { className: "figure", testid: `figure-${name}` },
      el("div", { className: "figure-label", text: name }),
      value,
    ),
  );
  figureValues.set(name, value);
}
const run = el("div", { className: "figure-value small", text: "–" });
figureBox.append(
  el("div", { className: "figure", testid: "figure-run" }, el("div", { className: "figure-label", text: "run" }), run),
);

function numbers(list) {
  return Array.isArray(list) ? list.filter((v) => typeof v === "number" && Number.isFinite(v)) : [];
}

function lastNumber(list) {
  const n = numbers(list);
  return n.length ? n[n.length - 1] : undefined;
}

function average(list) {
  const n = numbers(list);
  return n.length ? Math.round((n.reduce((a, b) => a + b, 0) / n.length) * 10) / 10 : undefined;
}

keepThreadInLinks();
startPage({
  thread: pageThread("demo"),
  render(client) {
    run.textContent = client.mirror.runId ? "running" : "idle";
    renderMessages(messageList, client.messages, 6);
    const state = client.state;
    const s = state !== null && typeof state === "object" ? state : {};
    for (const [name, read] of FIGURES) {
      let value;
      try {
        value = read(s);
      } catch {
        value = undefined;
      }
      figureValues.get(name).textContent = value === undefined ? "–" : asText(value);
    }
    chart.update(s.series);
    seriesLength.textContent = String(numbers(s.series).length);
  },
});
