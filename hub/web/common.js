// What every demo page shares: the HubClient of the page's thread, the status bar (connection,
// seq, lag, resyncs by cause), the JSON dump of the mirrored state, and small DOM helpers.
//
// State is untrusted input (anyone who may publish to the thread wrote it): it is only ever
// put in the page as text (textContent, input values, attribute values), never parsed as HTML.
// The hub serves these pages with a CSP that forbids inline scripts and styles.

import { HubClient, valueAt } from "/js/src/agui-hub.js";

/** Snapshot causes shown in the status bar (the hub's agui_hub_resyncs_total causes). */
export const CAUSES = ["join", "patch_failed", "gap", "conflict", "resume_too_old", "epoch_changed", "unrequested"];
/** Positions kept in the test history (seq -> the dump at that seq). */
const HISTORY = 400;

/** A new element: `attrs` may hold `text`, `className`, `testid`, `dataset`, or attributes. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null) continue;
    if (key === "text") node.textContent = String(value);
    else if (key === "className") node.className = value;
    else if (key === "testid") node.dataset.testid = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children) node.append(child); // strings become text nodes
  return node;
}

/** The element marked `data-testid=id` (every page's fixed parts are found this way). */
export function byTestId(id, root = document) {
  return root.querySelector(`[data-testid="${id}"]`);
}

/** A state value shown as text: strings as they are, anything else as compact JSON. */
export function asText(value) {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return JSON.stringify(value);
}

/** The thread this page watches: `?thread=ID`, else the page's default. */
export function pageThread(fallback) {
  return new URLSearchParams(location.search).get("thread") || fallback;
}

/** Links between the pages keep the `?thread=` the user gave. */
export function keepThreadInLinks() {
  const thread = new URLSearchParams(location.search).get("thread");
  if (!thread) return;
  for (const a of document.querySelectorAll("a[data-keep-thread]")) {
    const url = new URL(a.getAttribute("href"), location.href);
    url.searchParams.set("thread", thread);
    a.setAttribute("href", url.pathname + url.search);
  }
}

/** The token the hub wants, if any: the page's fragment (`#token=...`, never sent to a server). */
export function pageToken() {
  return new URLSearchParams(location.hash.slice(1)).get("token") || undefined;
}

/**
 * `fetch` of one of the hub's HTTP endpoints (`/v1/...`, same origin), with the page's token
 * as a bearer token when there is one.
 */
export function hubFetch(path, init = {}) {
  const token = pageToken();
  const headers = { ...(init.headers ?? {}) };
  if (token) headers.Authorization = `Bearer ${token}`;
  return fetch(path, { ...init, headers });
}

/** The consumer URL of `thread` on this page's hub, with `?presence=NAME` when given. */
export function presenceUrl(thread, name) {
  const url = new URL(`/v1/threads/${encodeURIComponent(thread)}`, location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  if (name !== undefined && name !== null) url.searchParams.set("presence", name);
  return url.href;
}

/**
 * Connect this page to `thread` and wire the status bar and the state dump. A token, if the hub
 * wants one, is taken from the page's fragment (`#token=...`: never sent to a server or logged).
 * `render(client)` is called after every change of the state or the messages. `path` (a JSON
 * Pointer, or an array of a few) has the client hold only that subtree of the state, or their
 * projection (`?path=`); `presence` (a name)
 * shows this tab on the thread (`?presence=`, see presence.js).
 *
 * Test hook: `window.__hub = {client, history, connections}`; `history` maps a seq to the dump
 * of `{state, messages}` this page held at that seq (the latest few hundred positions);
 * `connections` lists each connection's `{since, resumed, head}` (head: the hub's seq then).
 */
export function startPage({ thread, render = () => {}, path, presence }) {
  const bar = document.getElementById("hub-bar");
  let client;
  try {
    // With presence, the client is given the thread's URL with `?presence=NAME` in it: it keeps
    // that query on every connection (a reconnect shows this tab again) and adds its own.
    const where = presence === undefined ? { thread } : { url: presenceUrl(thread, presence) };
    client = new HubClient({
      ...where,
      path,
      token: pageToken(),
      backoff: { initial: 100, max: 2000, factor: 2, jitter: 0.5 },
    });
  } catch (err) {
    bar.replaceChildren(el("span", { className: "bar-error", testid: "status", text: String(err.message ?? err) }));
    return null;
  }
  const history = new Map();
  /** Each connection: the `since` it asked to resume from (null: a fresh join) and the welcome. */
  const connections = [];
  window.__hub = { client, history, connections };
  const parts = buildBar(bar, thread, path);
  const dump = byTestId("state-json");
  let deltas = 0;

  const refreshBar = () => updateBar(parts, client, deltas, connections);
  // The dump is the state as of `data-seq` (events that do not touch the state move the seq).
  const refreshDump = (withState) => {
    if (dump === null) return;
    dump.dataset.seq = String(client.seq);
    if (withState) dump.textContent = JSON.stringify(client.state, null, 2);
  };
  const remember = () => {
    if (!client.inSync) return; // half-repaired: the messages snapshot is still to come
    history.set(client.seq, JSON.stringify({ state: client.state, messages: client.messages }));
    if (history.size > HISTORY) history.delete(history.keys().next().value);
  };

  client.on("event", (event) => {
    if (event.type === "STATE_DELTA") deltas++;
    remember();
    refreshBar(); // e.g. the MESSAGES_SNAPSHOT that completes a repair (same seq, in sync now)
  });
  client.on("status", (status) => {
    if (status === "connecting")
      connections.push({ since: client.mirror.resumePosition()[0], resumed: null, head: null });
  });
  client.on("welcome", (value) => {
    const last = connections[connections.length - 1];
    if (last !== undefined && last.resumed === null)
      Object.assign(last, { resumed: value.resumed === true, head: value.seq });
  });
  client.on("state", () => {
    refreshDump(true);
    render(client);
  });
  client.on("messages", () => render(client));
  for (const name of ["status", "seq", "lag", "snapshot", "resync", "welcome", "conflict", "publish"]) {
    client.on(name, () => {
      refreshBar();
      if (name === "seq") refreshDump(false);
    });
  }
  refreshBar();
  return client;
}

function buildBar(bar, thread, path) {
  const field = (label, testid, text = "") => {
    const value = el("span", { className: "bar-value", testid, text });
    bar.append(el("span", { className: "bar-field" }, el("span", { className: "bar-label", text: label }), value));
    return value;
  };
  bar.replaceChildren();
  const parts = {
    thread: field("thread", "thread", thread),
    path: path ? field("holds", "path", [path].flat().join(" ")) : null,
    status: field("status", "status", "connecting"),
    seq: field("seq", "seq", "0"),
    lag: field("lag", "lag", "0"),
    sync: field("copy", "in-sync", "joining"),
    reconnects: field("reconnects", "reconnects", "0"),
    resumed: field("last connect", "resumed", "-"),
    deltas: field("deltas", "deltas", "0"),
    causes: {},
  };
  const list = el("span", { className: "bar-causes", testid: "resyncs" });
  bar.append(
    el("span", { className: "bar-field" }, el("span", { className: "bar-label", text: "resyncs by cause" }), list),
  );
  parts.causeList = list;
  for (const cause of CAUSES) addCause(parts, cause);
  return parts;
}

function addCause(parts, cause) {
  const count = el("span", { className: "cause-count", text: "0" });
  const item = el(
    "span",
    { className: "cause", testid: `resync-${cause}`, dataset: { count: "0" } },
    `${cause} `,
    count,
  );
  parts.causes[cause] = { item, count };
  parts.causeList.append(item);
}

function updateBar(parts, client, deltas, connections) {
  parts.status.textContent = client.status;
  parts.status.dataset.status = client.status;
  parts.seq.textContent = String(client.seq);
  parts.lag.textContent = String(client.lag);
  parts.sync.textContent = client.inSync ? "in sync" : `waiting for a snapshot (${client.mirror.awaiting ?? "repair"})`;
  parts.sync.dataset.inSync = String(client.inSync);
  parts.reconnects.textContent = String(client.reconnects);
  const last = connections.findLast((c) => c.resumed !== null);
  if (last === undefined) parts.resumed.textContent = "-";
  else if (last.resumed)
    parts.resumed.textContent = `resumed from seq ${last.since}, replayed ${last.head - last.since}`;
  else
    parts.resumed.textContent =
      last.since === null ? "joined (snapshot)" : `asked to resume from ${last.since}: rejoined (snapshot)`;
  parts.resumed.dataset.resumed = last === undefined ? "" : String(last.resumed);
  parts.deltas.textContent = String(deltas);
  // Snapshots this copy took, by cause; the hub.resync requests it sent are in the tooltip.
  for (const cause of Object.keys(client.snapshots)) if (!(cause in parts.causes)) addCause(parts, cause);
  for (const [cause, { item, count }] of Object.entries(parts.causes)) {
    const n = client.snapshots[cause] ?? 0;
    count.textContent = String(n);
    item.dataset.count = String(n);
    item.dataset.asked = String(client.resyncs[cause] ?? 0);
    item.title = `${n} snapshot(s) for ${cause}; ${client.resyncs[cause] ?? 0} hub.resync request(s) sent`;
    item.classList.toggle("nonzero", n > 0);
  }
}

/** The assistant's messages, newest last, as text. */
export function renderMessages(list, messages, limit = 8) {
  const items = messages
    .slice(-limit)
    .map((m) =>
      el(
        "li",
        { className: `message role-${String(m.role).replace(/[^a-z_-]/gi, "")}`, testid: "message" },
        el("span", { className: "message-role", text: asText(m.role) }),
        el("span", { className: "message-text", text: asText(m.content ?? "") }),
      ),
    );
  if (items.length === 0) items.push(el("li", { className: "empty", text: "No messages yet." }));
  list.replaceChildren(...items);
}

export { valueAt };
