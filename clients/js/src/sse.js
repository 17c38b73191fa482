// The event stream of a thread (`GET /v1/threads/{id}/events`, text/event-stream) behind the
// small part of the WebSocket interface HubClient uses, so the same client logic (handshake,
// mirror, reconnects) runs over either.
//
// What differs, and is surfaced here:
// - EventSource reconnects by itself when the stream ends or breaks, sending `Last-Event-ID`
//   (the hub gives every live event `id: {epoch}:{seq}`, and the position a repair brought the
//   client to as an id-only event). That is not a close: `onreconnecting()` says the stream was
//   lost and the source is on it; a new hub.welcome then arrives on the same object.
// - A source that fails for good (an HTTP error, not an event stream) is a close (code 1006):
//   HubClient then opens a new one itself, with `?since=&epoch=` from its copy.
// - Nothing can be sent: commands (hub.publish, hub.resync, hub.ack) are WebSocket-only.
// - Heartbeats are SSE comments, which EventSource never shows.

const CONNECTING = 0;
const OPEN = 1;
const CLOSED = 3; // WebSocket.CLOSED (EventSource.CLOSED is 2)

/** The thread's HTTP URL (`http(s)://.../v1/threads/ID`) from its WebSocket URL. */
export function httpUrl(wsUrl) {
  const url = new URL(wsUrl);
  if (url.protocol === "ws:") url.protocol = "http:";
  else if (url.protocol === "wss:") url.protocol = "https:";
  url.search = "";
  url.hash = "";
  return url;
}

/** The thread's event stream URL. */
export function eventsUrl(wsUrl) {
  const url = httpUrl(wsUrl);
  url.pathname = `${url.pathname.replace(/\/+$/, "")}/events`;
  return url;
}

export class EventStream {
  /** `EventSource`: the constructor (the browser's, or one for Node). */
  constructor(url, EventSource) {
    this.url = url;
    this.protocol = "";
    this.binaryType = "arraybuffer";
    this.readyState = CONNECTING;
    this.onopen = null;
    this.onmessage = null;
    this.onerror = null;
    this.onclose = null;
    /** The stream was lost (`wasOpen`) or an attempt failed, and the source reconnects itself. */
    this.onreconnecting = null;
    const source = new EventSource(url);
    /** The EventSource. */
    this.source = source;
    source.onopen = () => {
      if (this.readyState === CLOSED) return;
      this.readyState = OPEN;
      this.onopen?.();
    };
    source.onmessage = (message) => {
      if (this.readyState !== CLOSED) this.onmessage?.({ data: message.data, lastEventId: message.lastEventId });
    };
    source.onerror = () => {
      if (this.readyState === CLOSED) return;
      if (source.readyState === 2) {
        this._end(1006, "the event stream failed");
        return;
      }
      const wasOpen = this.readyState === OPEN;
      this.readyState = CONNECTING;
      this.onreconnecting?.(wasOpen);
    };
  }

  /** The last event id the source holds, as far as it tells (the browser's does not). */
  get lastEventId() {
    return this.source.lastEventId ?? null;
  }

  send() {
    throw new Error("an event stream cannot send: commands need the WebSocket transport");
  }

  close(code = 1000, reason = "") {
    if (this.readyState !== CLOSED) this._end(code, reason);
  }

  /** Drop it as a network failure would (no reconnect by the source: the client reopens). */
  terminate() {
    this.close(1006, "terminated");
  }

  _end(code, reason) {
    this.readyState = CLOSED;
    this.source.close();
    // Not from inside the caller's frame handling: the client sees the close on its own turn.
    queueMicrotask(() => this.onclose?.({ code, reason }));
  }
}
