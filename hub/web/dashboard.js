// The live dashboard: a chart of the agent's series that moves with every STATE_DELTA, figures
// of it, and what the agent is saying. Read-only.
//
// It holds only what it draws: the client subscribes to the subtree `/series` (`?path=`,
// docs/protocol.md "Subscribing to part of the state"), so the hub sends it that array and the
// deltas under it, re-rooted (`/series/-` arrives as `/-`), and none of the document's sections
// and text. Messages and run events come as on any connection.

import { asText, byTestId, el, keepThreadInLinks, pageThread, renderMessages, startPage } from "./common.js";
import { LineChart } from "./chart.js";

/** The part of the state this page draws: its `state` is this subtree. */
export const SERIES = "/series";

const figureBox = byTestId("figures");
const messageList = byTestId("messages");
const seriesLength = byTestId("series-length");
const chart = new LineChart(byTestId("chart-box"), { label: "the agent's series" });

/** Figure name -> how to read it from the series (untrusted: anything may be missing). */
const FIGURES = [
  ["latest", (n) => n.at(-1)],
  ["average", (n) => (n.length ? Math.round((n.reduce((a, b) => a + b, 0) / n.length) * 10) / 10 : undefined)],
  ["low", (n) => (n.length ? Math.min(...n) : undefined)],
  ["high", (n) => (n.length ? Math.max(...n) : undefined)],
  ["change", (n) => (n.length > 1 ? n.at(-1) - n.at(-2) : undefined)],
];
const figureValues = new Map();
for (const [name] of FIGURES) {
  const value = el("div", { className: "figure-value", text: "–" });
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
  path: SERIES,
  render(client) {
    run.textContent = client.mirror.runId ? "running" : "idle";
    renderMessages(messageList, client.messages, 6);
    const series = numbers(client.state); // the subtree: the series, or null while there is none
    for (const [name, read] of FIGURES) {
      const value = read(series);
      figureValues.get(name).textContent = value === undefined ? "–" : asText(value);
    }
    chart.update(client.state);
    seriesLength.textContent = String(series.length);
  },
});
