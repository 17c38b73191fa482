// Test support: a small EventSource for Node (20 has none), as the HTML standard describes it
// (https://html.spec.whatwg.org/multipage/server-sent-events.html), over node:http.
//
// What a browser does and HubClient's SSE mode relies on: `retry:` sets the reconnection delay;
// an event's `id:` sets the last event id even when it has no data (such an event dispatches
// nothing); a stream that ends or breaks is reopened after the delay with `Last-Event-ID`; a
// response that is not 200 `text/event-stream` fails the source for good (readyState CLOSED).
// Comments are skipped (a browser never shows them); `comments` counts them for tests.
//
// Test hooks a browser lacks: `cut()` destroys the current connection as a network failure
// would (the source reconnects by itself); `requests` lists the headers each connection sent.

import http from "node:http";
import https from "node:https";

const CONNECTING = 0;
const OPEN = 1;
const CLOSED = 2;

export class EventSource extends EventTarget {
  static CONNECTING = CONNECTING;
  static OPEN = OPEN;
  static CLOSED = CLOSED;

  constructor(url, { withCredentials = false, headers = {} } = {}) {
    super();
    this.url = new URL(url).href;
    this.withCredentials = withCredentials;
    this.readyState = CONNECTING;
    this.onopen = null;
    this.onmessage = null;
    this.onerror = null;
    /** The last event id string (what a reconnect sends as Last-Event-ID). */
    this.lastEventId = "";
    /** ms to wait before reconnecting (the stream's `retry:` changes it). */
    this.reconnectionTime = 3000;
    /** Headers of every request this source made, in order (a test hook). */
    this.requests = [];
    /** Comment lines received (a test hook: heartbeats arrive as comments). */
    this.comments = 0;
    this._headers = headers;
    this._request = null;
    this._timer = null;
    this._connect();
  }

  close() {
    this.readyState = CLOSED;
    clearTimeout(this._timer);
    this._request?.destroy();
    this._request = null;
  }

  /** Break the current connection as the network would: the source reconnects by itself. */
  cut() {
    this._request?.destroy(new Error("cut"));
  }

  _fire(type, init = {}) {
    const event = type === "message" ? new MessageEvent("message", init) : new Event(type);
    this[`on${type}`]?.call(this, event);
    this.dispatchEvent(event);
  }

  _connect() {
    const headers = { Accept: "text/event-stream", "Cache-Control": "no-cache", ...this._headers };
    if (this.lastEventId !== "") headers["Last-Event-ID"] = this.lastEventId;
    this.requests.push(headers);
    const get = this.url.startsWith("https:") ? https.get : http.get;
    const request = get(this.url, { headers, agent: false }, (response) => this._onResponse(request, response));
    request.on("error", () => this._lost(request));
    this._request = request;
  }

  _onResponse(request, response) {
    if (request !== this._request || this.readyState === CLOSED) return;
    const type = String(response.headers["content-type"] ?? "").split(";")[0].trim().toLowerCase();
    if (response.statusCode !== 200 || type !== "text/event-stream") {
      response.resume();
      this._fail();
      return;
    }
    this.readyState = OPEN;
    this._fire("open");
    const decoder = new TextDecoder("utf-8");
    let buffer = "";
    let first = true;
    const fields = { data: "", type: "" };
    response.on("data", (chunk) => {
      if (request !== this._request) return;
      buffer += decoder.decode(chunk, { stream: true });
      if (first && buffer.length > 0) {
        if (buffer.charCodeAt(0) === 0xfeff) buffer = buffer.slice(1);
        first = false;
      }
      // Lines end with CRLF, LF or CR; a CR at the very end may be the first half of a CRLF.
      let match;
      const line = /\r\n|\n|\r(?!$)/g;
      let start = 0;
      while ((match = line.exec(buffer)) !== null) {
        this._line(buffer.slice(start, match.index), fields);
        if (request !== this._request) return; // closed by a listener
        start = match.index + match[0].length;
      }
      buffer = buffer.slice(start);
    });
    response.on("end", () => this._lost(request));
    response.on("error", () => this._lost(request));
    response.on("close", () => this._lost(request));
  }

  _line(line, fields) {
    if (line === "") {
      this._dispatch(fields);
      return;
    }
    if (line.startsWith(":")) {
      this.comments++;
      return;
    }
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "data") fields.data += value + "\n";
    else if (name === "event") fields.type = value;
    else if (name === "id" && !value.includes("\0")) fields.id = value;
    else if (name === "retry" && /^\d+$/.test(value)) this.reconnectionTime = Number(value);
  }

  _dispatch(fields) {
    if (fields.id !== undefined) this.lastEventId = fields.id; // set even without data
    delete fields.id;
    if (fields.data === "") {
      fields.type = "";
      return;
    }
    const data = fields.data.endsWith("\n") ? fields.data.slice(0, -1) : fields.data;
    const type = fields.type || "message";
    fields.data = "";
    fields.type = "";
    if (type === "message") this._fire("message", { data, lastEventId: this.lastEventId, origin: new URL(this.url).origin });
  }

  /** The connection is over (ended, broken, refused): reconnect after the delay. */
  _lost(request) {
    if (request !== this._request || this.readyState === CLOSED) return;
    this._request = null;
    request.destroy();
    this.readyState = CONNECTING;
    this._fire("error");
    if (this.readyState !== CONNECTING) return; // a listener closed it
    this._timer = setTimeout(() => {
      if (this.readyState === CONNECTING) this._connect();
    }, this.reconnectionTime);
  }

  _fail() {
    this._request?.destroy();
    this._request = null;
    this.readyState = CLOSED;
    this._fire("error");
  }
}
