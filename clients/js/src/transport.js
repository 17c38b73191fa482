// How frames reach a HubClient: a WebSocket (commands go back up it), or the thread's event
// stream, `GET /v1/threads/ID/events` through an EventSource (sse.js: read-only, resumed by the
// source itself with Last-Event-ID; runs go over HTTP, http-runs.js). The client asks its
// transport for the URL to open, the socket, and the runs; the rest of what differs over SSE
// (the source's own reconnects, a repair as a fresh join) is in connection.js.

import { MSGPACK_SUBPROTOCOL } from "./codec.js";
import { HttpRuns } from "./http-runs.js";
import { Runs } from "./runs.js";
import { EventStream, eventsUrl, httpUrl } from "./sse.js";

/** How frames reach this client: a WebSocket, or the thread's event stream (SSE). */
export const TRANSPORTS = new Set(["websocket", "sse"]);

/**
 * The transport `options.transport` names (default `websocket`), with its constructor from
 * `options` or the global one; throws a TypeError for one that cannot work here.
 */
export function transportFor(options, encoding) {
  const name = options.transport ?? "websocket";
  if (!TRANSPORTS.has(name)) {
    throw new TypeError(`transport must be "websocket" or "sse", not ${JSON.stringify(name)}`);
  }
  return name === "sse" ? new SseTransport(options, encoding) : new WebSocketTransport(options);
}

class WebSocketTransport {
  constructor(options) {
    this.name = "websocket";
    /** Commands (hub.publish, hub.resync, hub.ack) can be sent. */
    this.canSend = true;
    /** The hub sends a heartbeat to an idle consumer every 15 s. */
    this.idleTimeout = 45_000;
    this.WebSocket = options.WebSocket ?? globalThis.WebSocket;
    if (typeof this.WebSocket !== "function") {
      throw new TypeError("no WebSocket here: pass options.WebSocket (in Node, the ws package)");
    }
  }

  /** The URL to connect to, from the thread's URL (`ws(s)://.../v1/threads/ID`). */
  url(threadUrl) {
    return new URL(threadUrl);
  }

  open(href, encoding) {
    const protocols = encoding === "msgpack" ? [MSGPACK_SUBPROTOCOL] : undefined;
    return protocols ? new this.WebSocket(href, protocols) : new this.WebSocket(href);
  }

  /** Runs as commands on the socket, taking turns with the edits (runs.js). */
  runs({ send, emit, timeout, busy, idle, turn }) {
    return new Runs({ send, emit, timeout, busy, idle, turn });
  }
}

class SseTransport {
  constructor(options, encoding) {
    this.name = "sse";
    /** Nothing goes up an event stream. */
    this.canSend = false;
    /** Heartbeats are SSE comments, which EventSource does not pass on. */
    this.idleTimeout = Infinity;
    if (encoding !== "json") throw new TypeError("an event stream carries JSON only: encoding must be json");
    this.EventSource = options.EventSource ?? globalThis.EventSource;
    if (typeof this.EventSource !== "function") {
      throw new TypeError("no EventSource here: pass options.EventSource");
    }
    const fetch = options.fetch ?? globalThis.fetch?.bind(globalThis);
    this.fetch = fetch ?? (() => Promise.reject(new TypeError("no fetch here: pass options.fetch")));
  }

  url(threadUrl) {
    return eventsUrl(threadUrl);
  }

  open(href) {
    return new EventStream(href, this.EventSource);
  }

  /** Runs as HTTP requests (http-runs.js), which need no stream and do not take turns. */
  runs({ url, token, emit, timeout }) {
    return new HttpRuns({ url: httpUrl(url).href, fetch: this.fetch, token, emit, timeout });
  }
}
