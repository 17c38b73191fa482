// The operator board of handoff receipts: an ordinary hub thread (default `ops`; `?thread=`)
// whose state is {as_of, counts: {state: n}, operations: {id: {state, reason, action, ...}},
// more: {state: n}, capped, limits} (hub/receipts/board.py): exact counts, and the operations
// an operator acts on (bounded; settled ones only for a while). Operations needing attention
// come first. A count filters the table: then it pages through every operation in that state
// with GET /v1/receipts/operations (newest change first). An operation's id opens its history
// (GET /v1/receipts/operations/{id}), each receipt's trace id linked to the trace viewer when
// the hub has a --trace-url. Everything from the hub is untrusted: shown as text only.

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
  ["verified", "completed and the outcome verified (listed for a while, then only counted)"],
];
const ORDER = new Map(STATES.map(([state], i) => [state, i]));
const COLUMNS = ["state", "reason", "action", "attempts", "expected_artifact", "updated_at"];
const PAGE = 50;
const API = "/v1/receipts/operations";

const countBox = byTestId("counts");
const rows = byTestId("operations");
const none = byTestId("no-operations");
const asOf = byTestId("as-of");
const filterNote = byTestId("filter");
const moreNote = byTestId("more");
const pager = byTestId("pager");
const older = byTestId("older");
const newer = byTestId("newer");
const historyBox = byTestId("history");
const token = new URLSearchParams(location.hash.slice(1)).get("token");

let filter = null;
let lastClient = null;
/** The paged view of one state: the cursors of the pages before this one, and the next. */
let paging = { cursors: [], cursor: null, next: null, items: [], count: null };
let pageRequest = 0;

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

/** GET a receipts query as JSON, with the page's token (if any). */
async function getJson(path) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const answer = await fetch(path, { headers, cache: "no-store" });
  const body = await answer.json().catch(() => ({}));
  if (!answer.ok) throw new Error(asText(body.message) || `HTTP ${answer.status}`);
  return body;
}

/** The trace viewer's link for a trace id, or null: only http(s) templates, the id encoded. */
export function traceLink(template, traceId) {
  if (typeof template !== "string" || typeof traceId !== "string" || traceId === "") return null;
  if (!/^https?:\/\//i.test(template) || !template.includes("{trace_id}")) return null;
  const href = template.split("{trace_id}").join(encodeURIComponent(traceId));
  try {
    const url = new URL(href);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
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
    card.addEventListener("click", () => setFilter(filter === state ? null : state));
    return card;
  });
  countBox.replaceChildren(...cards);
}

function setFilter(state) {
  filter = state;
  paging = { cursors: [], cursor: null, next: null, items: [], count: null };
  if (filter !== null) loadPage(null);
  if (lastClient) render(lastClient);
}

/** Fetch one page of the filtered state (the newest for cursor null). */
async function loadPage(cursor) {
  const request = ++pageRequest;
  paging.loading = true; // older/newer wait for this page: a double click moves one page
  const params = new URLSearchParams({ state: filter, limit: String(PAGE) });
  if (cursor) params.set("cursor", cursor);
  try {
    const body = await getJson(`${API}?${params}`);
    if (request !== pageRequest) return; // a later request (or filter) replaced this one
    paging.cursor = cursor;
    paging.items = Array.isArray(body.operations) ? body.operations.filter(isObject) : [];
    paging.next = typeof body.next === "string" ? body.next : null;
    paging.error = null;
  } catch (err) {
    if (request !== pageRequest) return;
    paging.error = String(err.message ?? err);
  }
  paging.loading = false;
  if (lastClient) render(lastClient);
}

// A double click moves one page: its second click (event.detail 2) is not a step, whether or
// not the page it asked for has come by then (on a busy machine it had, and it moved two).
older.addEventListener("click", (event) => {
  if (event.detail > 1 || !paging.next || paging.loading) return;
  paging.cursors.push(paging.cursor);
  loadPage(paging.next);
});
newer.addEventListener("click", (event) => {
  if (event.detail > 1 || paging.cursors.length === 0 || paging.loading) return;
  loadPage(paging.cursors.pop());
});

function cell(name, op) {
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
}

function row(id, op) {
  const open = el("button", { type: "button", className: "link", testid: "open-operation", text: id });
  open.addEventListener("click", () => showHistory(id));
  return el(
    "tr",
    { testid: "operation", dataset: { id, state: asText(op.state) } },
    el("td", { dataset: { column: "id" } }, open),
    ...COLUMNS.map((name) => cell(name, op)),
  );
}

function render(client) {
  lastClient = client;
  const state = isObject(client.state) ? client.state : {};
  const operations = Object.entries(isObject(state.operations) ? state.operations : {}).filter(([, op]) =>
    isObject(op),
  );
  const counts = isObject(state.counts) ? state.counts : {};
  const more = isObject(state.more) ? state.more : {};
  asOf.textContent = state.as_of === undefined ? "–" : asText(state.as_of);
  renderCounts(counts, operations);
  if (filter !== null) {
    // A change of the filtered state's count: the page may be out of date; fetch it again.
    if (paging.count !== null && paging.count !== counts[filter]) loadPage(paging.cursor);
    paging.count = counts[filter] ?? null;
    const total = asText(counts[filter] ?? "?");
    filterNote.textContent = paging.error
      ? `(${filter}: ${paging.error})`
      : `(${filter}: ${paging.items.length} on this page of ${total}, newest change first; click the count again for the board)`;
    rows.replaceChildren(...paging.items.map((op) => row(asText(op.operation_id), op)));
    moreNote.textContent = "";
    pager.hidden = false;
    older.disabled = !paging.next || paging.loading === true;
    newer.disabled = paging.cursors.length === 0 || paging.loading === true;
    none.hidden = paging.items.length > 0;
    return;
  }
  pager.hidden = true;
  operations.sort(
    ([a, x], [b, y]) => (ORDER.get(x.state) ?? 99) - (ORDER.get(y.state) ?? 99) || (a < b ? -1 : a > b ? 1 : 0),
  );
  filterNote.textContent = `(${operations.length} listed)`;
  const hidden = Object.entries(more).filter(([, n]) => typeof n === "number" && n > 0);
  moreNote.textContent =
    hidden.length === 0
      ? ""
      : `Not listed here: ${hidden.map(([s, n]) => `${n} ${s}`).join(", ")}` +
        (state.capped ? " (the board lists the latest of each state)" : "") +
        ". Click a count to page through all of them.";
  rows.replaceChildren(...operations.map(([id, op]) => row(id, op)));
  none.hidden = operations.length > 0;
}

let historyRequest = 0;

async function showHistory(id) {
  const request = ++historyRequest;
  historyBox.hidden = false;
  const title = el("h2", { text: `Operation ${id}` });
  historyBox.replaceChildren(title, el("p", { className: "hint", text: "loading…" }));
  let body;
  try {
    body = await getJson(`${API}/${encodeURIComponent(id)}`);
  } catch (err) {
    if (request !== historyRequest) return; // another operation was opened meanwhile
    historyBox.replaceChildren(title, el("p", { className: "bar-error", text: String(err.message ?? err) }));
    return;
  }
  if (request !== historyRequest) return; // another operation was opened meanwhile
  const c = isObject(body.classification) ? body.classification : {};
  const summary = el(
    "p",
    { testid: "history-state" },
    el("span", { className: `pill ${stateClass(c.state)}`, text: asText(c.state) }),
    ` ${asText(c.reason)} · next: ${asText(c.action)} · ${asText(c.boundary)}`,
  );
  const close = el("button", { type: "button", className: "link", text: "close" });
  close.addEventListener("click", () => {
    historyBox.hidden = true;
  });
  const attempts = (Array.isArray(body.attempts) ? body.attempts : []).filter(isObject).map((attempt) => {
    const receipts = (Array.isArray(attempt.receipts) ? attempt.receipts : []).filter(isObject);
    const actions = (Array.isArray(attempt.actions) ? attempt.actions : []).filter(isObject);
    const lines = receipts.map((r) => {
      const href = traceLink(body.trace_url, r.trace_id);
      const trace = href
        ? el("a", { href, target: "_blank", rel: "noopener noreferrer", testid: "trace-link", text: asText(r.trace_id) })
        : asText(r.trace_id);
      return el(
        "tr",
        { testid: "history-receipt", dataset: { event: asText(r.event) } },
        el("td", { dataset: { column: "at" }, text: asText(r.at).replace("T", " ") }),
        el("td", { dataset: { column: "event" }, text: asText(r.event) }),
        el("td", { dataset: { column: "reason" }, text: asText(r.reason) }),
        el("td", { dataset: { column: "expected_artifact" }, text: asText(r.expected_artifact) }),
        el("td", { dataset: { column: "trace" } }, trace),
      );
    });
    const acted = actions.map((a) =>
      el("li", {
        text: `${asText(a.at)} ${asText(a.action)} by ${asText(a.authority)} (attempt ${asText(a.attempt)} of ${asText(a.attempt_limit)})`,
      }),
    );
    return el(
      "div",
      { className: "attempt", testid: "attempt" },
      el("h3", { text: `handoff ${asText(attempt.handoff_id)}` }),
      el(
        "div",
        { className: "table-box" },
        el(
          "table",
          { className: "operations" },
          el(
            "thead",
            {},
            el("tr", {}, ...["at", "event", "reason", "expected artifact", "trace"].map((h) => el("th", { text: h }))),
          ),
          el("tbody", {}, ...lines),
        ),
      ),
      acted.length ? el("ul", { className: "hint" }, ...acted) : "",
    );
  });
  const cut = typeof body.truncated === "number" && body.truncated > 0 ? ` (the latest shown; ${body.truncated} older left out)` : "";
  historyBox.replaceChildren(
    el("div", { className: "history-head" }, title, close),
    summary,
    el("p", { className: "hint", text: `${asText(body.records)} records${cut}, as of ${asText(body.as_of)}` }),
    ...attempts,
  );
}

startPage({ thread: pageThread("ops"), render });
