// The live dashboard: a chart of the agent's series that moves with every STATE_DELTA, figures
// of it and of the agent's progress, and what the agent is saying. Read-only.
//
// It holds only what it draws: the client subscribes to the paths it reads (`?path=` repeated,
// docs/protocol.md "Subscribing to part of the state"), so its state is their projection,
// `{series: [...], status: {step, phase}, counters: {words, sections}}`, and the hub sends it
// the deltas under them (with their own pointers: `/series/-`), none of the document's sections
// and text. Messages and run events come as on any connection.

import { asText, byTestId, el, keepThreadInLinks, pageThread, renderMessages, startPage } from "./common.js";
import { LineChart } from "./chart.js";

/** The parts of the state this page draws: its `state` is their projection. */
export const PATHS = ["/series", "/status", "/counters/words", "/counters/sections"];

const figureBox = byTestId("figures");
const messageList = byTestId("messages");
const seriesLength = byTestId("series-length");
const chart = new LineChart(byTestId("chart-box"), { label: "the agent's series" });

/**
 * Figure name -> how to read it from the state held (untrusted: anything may be missing) and
 * the series' numbers. The agent's progress (`/status`) and its counts (`/counters/words`, and
 * `/counters/sections`: the agent's count of the document's sections, not the sections).
 */
const FIGURES = [
  ["step", (s) => s.status?.step],
  ["phase", (s) => s.status?.phase],
  ["sections", (s) => s.counters?.sections],
  ["words", (s) => s.counters?.words],
  ["latest", (s, n) => n.at(-1)],
  ["average", (s, n) => (n.length ? Math.round((n.reduce((a, b) => a + b, 0) / n.length) * 10) / 10 : undefined)],
  ["low", (s, n) => (n.length ? Math.min(...n) : undefined)],
  ["high", (s, n) => (n.length ? Math.max(...n) : undefined)],
  ["change", (s, n) => (n.length > 1 ? n.at(-1) - n.at(-2) : undefined)],
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

keepThreadInLinks();
startPage({
  thread: pageThread("demo"),
  path: PATHS,
  render(client) {
    run.textContent = client.mirror.runId ? "running" : "idle";
    renderMessages(messageList, client.messages, 6);
    // The projection: an object holding those of the paths the thread has ({} before any).
    const state = client.state !== null && typeof client.state === "object" ? client.state : {};
    const series = numbers(state.series);
    for (const [name, read] of FIGURES) {
      let value;
      try {
        value = read(state, series);
      } catch {
        value = undefined;
      }
      figureValues.get(name).textContent = value === undefined ? "–" : asText(value);
    }
    chart.update(state.series);
    seriesLength.textContent = String(series.length);
  },
});
