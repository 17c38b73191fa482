// A page on its own origin watching one thread with HubClient's SSE mode (the browser's own
// EventSource; runs over fetch). ?hub=http://127.0.0.1:PORT&thread=ID. What it held is kept
// for the test in window.__sse: the dump of {state, messages} at every seq it applied, every
// welcome, every status change, and the last event id of each message the source dispatched.

import { HubClient } from "/js/src/agui-hub.js";

const params = new URLSearchParams(location.search);
const client = new HubClient({
  url: params.get("hub"),
  thread: params.get("thread"),
  transport: "sse",
  backoff: { initial: 50, max: 500 },
});
const sse = {
  client,
  history: new Map(),
  welcomes: [],
  statuses: [],
  lastEventIds: [],
  applied: [],
};
window.__sse = sse;

const dump = () => JSON.stringify({ state: client.state, messages: client.messages });
client.on("welcome", (value) => sse.welcomes.push(value));
client.on("status", (status, detail) => {
  sse.statuses.push([status, detail?.resumed ?? detail?.willReconnect ?? null]);
  document.querySelector('[data-testid="status"]').textContent = status;
});
client.on("event", (event) => {
  sse.applied.push({ type: event.type, seq: event.metadata?.hub?.seq ?? null, sync: event.metadata?.hub?.sync === true });
  if (client.inSync) sse.history.set(client.seq, dump());
  document.querySelector('[data-testid="seq"]').textContent = String(client.seq);
  const pre = document.querySelector('[data-testid="state-json"]');
  pre.textContent = JSON.stringify(client.state, null, 2); // text, never markup
});
// What the browser's EventSource says its last event id was, message by message.
const watch = () => {
  const source = client.socket?.source;
  if (source && !source.__watched) {
    source.__watched = true;
    source.addEventListener("message", (m) => sse.lastEventIds.push(m.lastEventId));
  }
};
client.on("status", watch);
client.on("welcome", watch);
