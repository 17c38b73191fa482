// A HubClient's connection to the hub, one after another until the client closes: the URL with
// the token and `since`/`epoch`, the socket its transport opens, the handshake (hub.welcome or a
// refusal), backoff and retries, the open and idle timeouts, the close handshake. Frames after
// the welcome go to the client (HubClient._receive); so do the welcome and the drops.
//
// Over SSE the EventSource also reconnects by itself, with Last-Event-ID: a stream lost that the
// source takes care of (see _onStreamLost), and a copy that needs repairing drops its stream for
// a fresh join (an event stream cannot send hub.resync).

import { backoffDelay } from "./backoff.js";
import { decodeFrame, encodeFrame, loadMsgpack, MSGPACK_SUBPROTOCOL } from "./codec.js";
import { hubControl } from "./mirror.js";

/** hub.error codes, sent instead of a welcome, after which trying again later may work. */
const RETRYABLE_CODES = new Set(["unavailable", "internal"]);
/** The query parameter that carries a token (the hub's hub/auth; browsers cannot set headers). */
export const TOKEN_PARAM = "access_token";
/** Close code this client uses when it drops a connection on purpose to reconnect. */
export const CLOSE_RECONNECT = 4000;
const OPEN = 1; // WebSocket.OPEN, the same in browsers and in the ws package

export class Connection {
  /**
   * `client`: the HubClient served. Read from it at each use: `url`, `token`, `encoding`,
   * `backoff`, `maxRetries`, `openTimeout`, `idleTimeout`, `mirror` (where to resume from), its
   * `_transport`, `_timers` and `_closing`. Told: `_setStatus`, `_warn`, `_noteError`,
   * `_connected` (a welcome), `_receive` (a frame after it), `_dropped` (the connection is gone),
   * `closeCodes`, `_fail` (given up), `_wake`.
   */
  constructor(client, { msgpack = null } = {}) {
    this.client = client;
    /** The WebSocket, or the EventStream (sse.js), of the current connection; null between. */
    this.ws = null;
    this._msgpack = msgpack;
    this._connecting = false;
    this._attempt = 0;
    this._welcomed = false;
    this._fatal = null;
    this._askedSince = false;
    this._heldEpoch = null;
    this._lastFrame = 0;
    this._whenClosed = null;
    /** SSE: why this client dropped its stream for a fresh join (it cannot ask hub.resync). */
    this._rejoinFor = null;
  }

  async open() {
    const client = this.client;
    if (client._closing || this._connecting) return;
    this._connecting = true;
    client._setStatus("connecting");
    let ws;
    let url;
    let token;
    try {
      token = typeof client.token === "function" ? await client.token() : client.token;
    } catch (err) {
      // Getting a token may fail for a while (its server is down): try again later.
      this._connecting = false;
      client._warn(`the token function failed: ${err?.message ?? err}`);
      this._retry(1006, "no token");
      return;
    }
    try {
      if (client.encoding === "msgpack") this._msgpack ??= await loadMsgpack();
      const [since, epoch] = client.mirror.resumePosition();
      url = client._transport.url(client.url);
      // One `path` is that subtree; several (repeated) their projection.
      for (const path of client.path === null ? [] : [client.path].flat()) url.searchParams.append("path", path);
      if (since !== null) {
        url.searchParams.set("since", String(since));
        url.searchParams.set("epoch", epoch);
      }
      if (token) url.searchParams.set(TOKEN_PARAM, token);
      if (client._closing) return;
      ws = client._transport.open(url.href, client.encoding);
      ws.binaryType = "arraybuffer";
      this._askedSince = since !== null;
      this._heldEpoch = client.mirror.epoch;
    } catch (err) {
      client._fail(err); // a bad URL, a WebSocket that cannot be built: a retry will not help
      return;
    } finally {
      this._connecting = false;
    }
    this.ws = ws;
    this._welcomed = false;
    this._fatal = null;
    ws.onopen = () => {
      if (ws !== this.ws) return;
      if (client.encoding === "msgpack" && ws.protocol !== MSGPACK_SUBPROTOCOL) {
        this._fatal = new Error("the hub did not accept the agui-hub.msgpack subprotocol");
        ws.close(1000, "subprotocol refused");
      }
    };
    ws.onmessage = (message) => {
      if (ws === this.ws) this._onData(ws, message.data);
    };
    ws.onerror = () => {}; // a close event follows
    ws.onclose = (event) => {
      if (ws === this.ws) this._onClose(event);
    };
    ws.onreconnecting = (wasOpen) => {
      if (ws === this.ws) this._onStreamLost(ws, wasOpen);
    };
    this._watchOpen(ws);
  }

  /**
   * Close the connection for good (the client is closing); resolves once it is closed. A peer
   * that never answers the close handshake is dropped after 2 s.
   */
  close() {
    const client = this.client;
    const ws = this.ws;
    if (ws === null || ws.readyState === 3) {
      this.ws = null;
      client._setStatus("closed", { final: true });
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      this._whenClosed = resolve;
      client._timers.set("close", 2_000, () => {
        ws.terminate?.();
        if (ws === this.ws) this._onClose({ code: 1006 });
      });
      try {
        ws.close(1000, "client closed");
      } catch {
        this._onClose({ code: 1006 });
      }
    });
  }

  /** Drop the connection as a network failure would (no close handshake where it can). */
  disconnect() {
    const ws = this.ws;
    if (ws === null) return;
    if (typeof ws.terminate === "function") ws.terminate();
    else ws.close(CLOSE_RECONNECT, "reconnecting");
  }

  /**
   * Send one command now; false if there is no open connection. Over SSE nothing goes up the
   * stream: a repair (hub.resync) is a fresh join; acks are not sent.
   */
  send(command) {
    const client = this.client;
    if (!client._transport.canSend) {
      if (command.type === "hub.resync") this._rejoin(command.reason);
      return false;
    }
    const ws = this.ws;
    if (ws === null || ws.readyState !== OPEN || !this._welcomed) return false;
    ws.send(encodeFrame(command, client.encoding, this._msgpack));
    return true;
  }

  /** No welcome within openTimeout: drop this connection and try again. */
  _watchOpen(ws) {
    this.client._timers.set("open", this.client.openTimeout, () => {
      if (ws === this.ws && !this._welcomed) ws.close(CLOSE_RECONNECT, "no welcome");
    });
  }

  /** Drop a connection that has said nothing for idleTimeout (one timer, re-armed lazily). */
  _watchIdle(ms) {
    this.client._timers.set("idle", ms, () => {
      const quiet = Date.now() - this._lastFrame;
      if (quiet >= this.client.idleTimeout) this.disconnect();
      else this._watchIdle(this.client.idleTimeout - quiet);
    });
  }

  /**
   * SSE: the stream ended or broke and the EventSource reconnects by itself, with Last-Event-ID,
   * the position of the last event it took. That resumes this copy only if the copy is whole
   * and at that position: not while it waits for a snapshot or holds half a repair (the source
   * may then hold an older id); then it is dropped, and a new stream opened for a fresh join.
   */
  _onStreamLost(ws, wasOpen) {
    const client = this.client;
    if (!this._welcomed) {
      // An attempt failed; the source tries again. Give up after maxRetries in a row.
      if (this._attempt++ >= client.maxRetries) ws.close(CLOSE_RECONNECT, "no connection");
      return;
    }
    this._welcomed = false;
    client._timers.clear("idle");
    client.closeCodes.push(1006);
    client._dropped();
    if (client.mirror.awaiting !== null || client.mirror.partial) {
      ws.close(CLOSE_RECONNECT, "rejoining");
      return;
    }
    this._askedSince = client.mirror.resumePosition()[0] !== null;
    this._heldEpoch = client.mirror.epoch;
    client._setStatus("closed", { code: 1006, reason: "stream lost", willReconnect: true, retryIn: null, wasOpen });
    client._setStatus("connecting");
    this._watchOpen(ws);
  }

  /** SSE: a copy that needs repairing rejoins from scratch (an event stream cannot send). */
  _rejoin(reason) {
    const ws = this.ws;
    if (ws === null || this.client._closing) return;
    this._rejoinFor = reason;
    ws.close(CLOSE_RECONNECT, `rejoining (${reason})`);
  }

  _onClose(event) {
    const client = this.client;
    this.ws = null;
    client._timers.clear("open");
    client._timers.clear("idle");
    const code = event?.code ?? 1006;
    client._dropped();
    if (client._closing) {
      client._timers.clear("close");
      client._setStatus("closed", { code, final: true });
      this._whenClosed?.();
      return;
    }
    client.closeCodes.push(code);
    if (this._fatal) {
      client._fail(this._fatal, code);
      return;
    }
    this._retry(code, event?.reason ?? "");
  }

  /** Try again after the next backoff delay, or give up after maxRetries attempts. */
  _retry(code, reason) {
    const client = this.client;
    if (client._closing) return;
    const attempt = this._attempt++;
    if (attempt >= client.maxRetries) {
      client._fail(new Error(`gave up connecting after ${attempt} attempts`), code);
      return;
    }
    const retryIn = backoffDelay(attempt, client.backoff);
    client._setStatus("closed", { code, reason, willReconnect: true, retryIn });
    client._timers.set("retry", retryIn, () => this.open(), { keepAlive: true });
  }

  _onData(ws, data) {
    const client = this.client;
    let frame;
    try {
      frame = decodeFrame(data, this._msgpack);
    } catch (err) {
      client._warn(`undecodable frame: ${err.message}`);
      return;
    }
    this._lastFrame = Date.now();
    if (!client._timers.has("idle")) this._watchIdle(client.idleTimeout);
    if (!this._welcomed) {
      this._onHandshake(ws, frame);
      return;
    }
    if (client.transport === "sse" && hubControl(frame)?.[0] === "hub.welcome") {
      // A new connection of the EventSource that said nothing of losing the last one.
      this._onStreamLost(ws, true);
      if (!this._welcomed && ws === this.ws && ws.readyState !== 3) this._onHandshake(ws, frame);
      client._wake();
      return;
    }
    client._receive(frame);
  }

  _onHandshake(ws, frame) {
    const control = hubControl(frame);
    if (control?.[0] === "hub.welcome" && control[1] && typeof control[1] === "object") {
      this._onWelcome(control[1], frame);
      return;
    }
    if (control?.[0] === "hub.error") {
      this.client._noteError(control[1]);
      if (!RETRYABLE_CODES.has(control[1]?.code)) {
        this._fatal = new Error(`the hub refused: ${control[1]?.code}: ${control[1]?.message}`);
      }
    } else {
      this._fatal = new Error(`expected hub.welcome first, got ${frame.type}`);
    }
    ws.close(this._fatal ? 1000 : CLOSE_RECONNECT, "no welcome");
  }

  /** The welcome: whether it resumed, and why the hub sent a snapshot join if it did not. */
  _onWelcome(value, frame) {
    this._welcomed = true;
    this.client._timers.clear("open");
    const resumed = this._askedSince && value.resumed !== false;
    let joinCause;
    if (this._askedSince && value.resumed === false) {
      joinCause = value.epoch !== this._heldEpoch ? "epoch_changed" : "resume_too_old";
    } else {
      joinCause = this._rejoinFor ?? "join";
    }
    this._rejoinFor = null;
    this._attempt = 0;
    this.client._connected(value, frame, { resumed, joinCause });
  }
}
