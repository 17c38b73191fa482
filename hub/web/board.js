// The operator board of handoff receipts: an ordinary hub thread (default `ops`; `?thread=`)
// whose state is {as_of, operations: {id: {state, reason, action, ...}}, counts: {state: n}}
// (hub/receipts/board.py). Operations needing attention come first; a count filters the table.

import { asText, byTestId, el, pageThread, startPage } from "./common.js";

/** States in the order an operator should look at them, and what they mean. */
const STATES = [
  ["stuck", "accepted, but no evidence of progress within its window"],
  ["failed_outcome", "completed with a failure, or not verified in time"],
  ["uncertain", "its receipts contradict each other or are incomplete"],
  ["orphaned", "delegated, never accepted within the ack window"],
  ["waiting", "the latest word from the worker is that it waits (with a reason)"],
  ["working", "accepted, with recent progress (or awaiting verification)"],
  ["pending", "delegated, still within its ack window"],
  ["verified", "completed and the outcome verified"],
];
const ORDER = new Map(STATES.map(([state], i) => [state, i]));
const COLUMNS = ["state", "reason", "action", "attempts", "expected_artifact", "updated_at"];

const countBox = byTestId("counts");
const rows = byTestId("operations");
const none = byTestId("no-operations");
const asOf = byTestId("as-of");
const filterNote = byTestId("filter");
let filter = null;
let lastClient = null;

byTestId("legend").replaceChildren(
  ...STATES.map(([state, meaning]) =>
    el("li", {}, el("span", { className: `pill ${stateClass(state)}`, text: state }), ` ${meaning}`),
  ),
);

function stateClass(state) {
  return `state-${String(state).replace(/[^a-z_]/gi, "")}`;
}

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function renderCounts(counts, operations) {
  const known = STATES.map(([state]) => state);
  const extra = Object.keys(counts).filter((state) => !ORDER.has(state));
  const cards = [...known, ...extra].map((state) => {
    const n = counts[state] ?? operations.filter(([, op]) => op.state === state).length;
    const card = el(
      "button",
      {
        type: "button",
        className: `count ${stateClass(state)}`,
        testid: `count-${state}`,
        dataset: { count: asText(n), state },
        "aria-pressed": String(filter === state),
      },
      el("div", { className: "figure-label", text: state.replace(/_/g, " ") }),
      el("div", { className: "count-value", text: asText(n) }),
    );
    card.addEventListener("click", () => {
      filter = filter === state ? null : state;
      if (lastClient) render(lastClient);
    });
    return card;
  });
  countBox.replaceChildren(...cards);
}

function render(client) {
  lastClient = client;
  const state = isObject(client.state) ? client.state : {};
  const operations = Object.entries(isObject(state.operations) ? state.operations : {}).filter(([, op]) =>
    isObject(op),
  );
  const counts = isObject(state.counts) ? state.counts : {};
  asOf.textContent = state.as_of === undefined ? "–" : asText(state.as_of);
  renderCounts(counts, operations);
  operations.sort(
    ([a, x], [b, y]) => (ORDER.get(x.state) ?? 99) - (ORDER.get(y.state) ?? 99) || (a < b ? -1 : a > b ? 1 : 0),
  );
  const shown = filter === null ? operations : operations.filter(([, op]) => op.state === filter);
  filterNote.textContent =
    filter === null
      ? `(${operations.length})`
      : `(${shown.length} ${filter} of ${operations.length}; click the count again for all)`;
  rows.replaceChildren(
    ...shown.map(([id, op]) => {
      const cells = COLUMNS.map((name) => {
        const value = op[name];
        if (name === "state") {
          return el(
            "td",
            { dataset: { column: name } },
            el("span", { className: `pill ${stateClass(value)}`, text: asText(value) }),
          );
        }
        // Times (RFC 3339) may break between the date and the time.
        const text = name === "updated_at" && typeof value === "string" ? value.replace("T", " ") : asText(value);
        const td = el("td", { dataset: { column: name }, text });
        if (name === "action" && op.boundary !== undefined) td.title = asText(op.boundary);
        return td;
      });
      return el(
        "tr",
        { testid: "operation", dataset: { id, state: asText(op.state) } },
        el("td", { dataset: { column: "id" }, text: id }),
        ...cells,
      );
    }),
  );
  none.hidden = operations.length > 0;
}

startPage({ thread: pageThread("ops"), render });
