// HubClient: one thread's state and messages, mirrored over a WebSocket and kept right.
//
// The bookkeeping (positions, gaps, failed patches, snapshots, messages) is the sans-I/O Mirror;
// this module adds the socket, reconnection with `since` (backoff with jitter), edits
// (hub.publish), acks for the hub's lag metrics, and events for the UI.
//
// With `transport: "sse"` the frames come over the thread's event stream instead (sse.js: an
// EventSource, which resumes by itself with Last-Event-ID), runs go over HTTP (http-runs.js),
// and a copy that needs repairing reconnects for a fresh join, since it cannot ask hub.resync.

import { backoffDelay, backoffOptions } from "./backoff.js";
import { checkEncoding, decodeFrame, encodeFrame, loadMsgpack, MSGPACK_SUBPROTOCOL } from "./codec.js";
import { Edits, testOps } from "./edits.js";
import { hubControl, MESSAGE_EVENTS, Mirror, positionOf, STATE_EVENTS } from "./mirror.js";
import { Emitter } from "./emitter.js";
import { HttpRuns } from "./http-runs.js";
import { checkPatch } from "./patch.js";
import { Runs } from "./runs.js";
import { EventStream, eventsUrl, httpUrl } from "./sse.js";
import { threadUrl } from "./url.js";

/** hub.error codes, sent instead of a welcome, after which trying again later may work. */
const RETRYABLE_CODES = new Set(["unavailable", "internal"]);
/** The query parameter that carries a token (the hub's hub/auth; browsers cannot set headers). */
export const TOKEN_PARAM = "access_token";
/** Close code this client uses when it drops a connection on purpose to reconnect. */
export const CLOSE_RECONNECT = 4000;
const OPEN = 1; // WebSocket.OPEN, the same in browsers and in the ws package
/** How frames reach this client: a WebSocket, or the thread's event stream (SSE). */
export const TRANSPORTS = new Set(["websocket", "sse"]);
const MAX_KEPT_ERRORS = 100;

export class HubClient extends Emitter {
  /**
   * @param {object} options
   * @param {string} [options.url] the hub, `ws://host:port` (default: the page's origin)
   * @param {string} options.thread the thread id
   * @param {string|(() => string|Promise<string>)} [options.token] sent as `?access_token=` on every
   *   connection (browsers cannot set headers on a WebSocket); a function is called each time
   * @param {'json'|'msgpack'} [options.encoding]
   * @param {Function} [options.WebSocket] a WebSocket constructor (in Node: the `ws` package)
   * @param {'websocket'|'sse'} [options.transport] `sse`: the thread's event stream (read-only)
   * @param {Function} [options.EventSource] an EventSource constructor (sse; default the global)
   * @param {Function} [options.fetch] the Fetch API (sse: runs over HTTP; default the global)
   * @param {object} [options.backoff] `{initial, max, factor, jitter}` (ms) for reconnects
   */
  constructor(options = {}) {
    super();
    const { url, thread } = threadUrl(options.url, options.thread);
    this.url = url.href;
    this.thread = thread;
    this.token = options.token ?? null;
    this.encoding = checkEncoding(options.encoding ?? "json");
    this.transport = options.transport ?? "websocket";
    if (!TRANSPORTS.has(this.transport)) {
      throw new TypeError(`transport must be "websocket" or "sse", not ${JSON.stringify(this.transport)}`);
    }
    const sse = this.transport === "sse";
    if (sse) {
      if (this.encoding !== "json") throw new TypeError("an event stream carries JSON only: encoding must be json");
      this.EventSource = options.EventSource ?? globalThis.EventSource;
      if (typeof this.EventSource !== "function") {
        throw new TypeError("no EventSource here: pass options.EventSource");
      }
      const fetch = options.fetch ?? globalThis.fetch?.bind(globalThis);
      this._fetch = fetch ?? (() => Promise.reject(new TypeError("no fetch here: pass options.fetch")));
    } else {
      this.WebSocket = options.WebSocket ?? globalThis.WebSocket;
      if (typeof this.WebSocket !== "function") {
        throw new TypeError("no WebSocket here: pass options.WebSocket (in Node, the ws package)");
      }
    }
    this.backoff = backoffOptions(options.backoff);
    /** Give up after this many failed connection attempts in a row. */
    this.maxRetries = options.maxRetries ?? Infinity;
    /** ms to wait for hub.welcome after connecting. */
    this.openTimeout = options.openTimeout ?? 10_000;
    /**
     * ms of silence after which the connection is presumed dead (the hub's heartbeat is 15 s).
     * Not over SSE: heartbeats are comments there, which EventSource does not pass on.
     */
    this.idleTimeout = options.idleTimeout ?? (sse ? Infinity : 45_000);
    /** ms between hub.ack reports of the position (0: never; the hub's lag metric uses them). */
    this.ackInterval = options.ackInterval ?? 1_000;
    this._msgpack = options.msgpack ?? null;
    this.mirror = new Mirror(options);
    /** Edits and runs go out one at a time, in the order asked (edits.js, runs.js). */
    this._turns = 0;
    this._edits = new Edits({
      send: (command) => this._send(command),
      emit: (name, value) => this._emit(name, value),
      timeout: options.publishTimeout ?? 10_000,
      busy: (turn) => this._runs.inflight !== null || this._runs.nextTurn < turn,
      idle: () => this._runs.pump(),
      turn: () => ++this._turns,
    });
    this._runs = sse
      ? new HttpRuns({
          url: httpUrl(this.url).href,
          fetch: this._fetch,
          token: () => (typeof this.token === "function" ? this.token() : this.token),
          emit: (name, value) => this._emit(name, value),
          timeout: options.runTimeout ?? 10_000,
        })
      : new Runs({
          send: (command) => this._send(command),
          emit: (name, value) => this._emit(name, value),
          timeout: options.runTimeout ?? 10_000,
          busy: (turn) => this._edits.inflight !== null || this._edits.nextTurn < turn,
          idle: () => this._edits.pump(),
          turn: () => ++this._turns,
        });

    /** 'connecting' | 'open' | 'closed' */
    this.status = "closed";
    /** The latest hub.welcome value ({threadId, seq, epoch, node, resumed}). */
    this.welcome = null;
    /** hub.error values received (the latest 100), oldest first. */
    this.errors = [];
    /** Sync STATE_SNAPSHOTs applied, by what caused them (see README). */
    this.snapshots = {};
    /** Edits refused with `conflict`. */
    this.conflicts = 0;
    /** Successful reconnects after the first connection. */
    this.reconnects = 0;
    /** Close codes of the connections that ended under this client (1006: no close frame). */
    this.closeCodes = [];
    /** The highest position the hub has said it reached (welcome, heartbeat, events). */
    this.head = 0;
    /** Problems with frames the hub sent, newest last (undecodable frames and the like). */
    this.warnings = [];

    this._ws = null;
    this._connecting = false;
    this._attempt = 0;
    this._closing = false;
    this._everOpen = false;
    this._timers = { retry: null, open: null, idle: null, ack: null, close: null };
    this._closed = null;
    this._whenClosed = null;
    this._fatal = null;
    this._ready = null;
    this._acked = 0;
    this._lastFrame = 0;
    this._reported = { seq: this.mirror.seq, lag: 0 };
    this._joinCause = "join";
    /** SSE: why this client dropped its stream for a fresh join (it cannot ask hub.resync). */
    this._rejoinFor = null;
    this._conflictPending = false;
    this._overlay = { key: null, value: null };
    this._stateVersion = 0;

    for (const [name, fn] of Object.entries(options.on ?? {})) this.on(name, fn);
    // Connect after the caller's synchronous code, so listeners added right after the
    // constructor see every status change.
    if (options.autoConnect ?? true) queueMicrotask(() => this._closing || this.connect().catch(() => {}));
  }

  // -- what it holds ----------------------------------------------------------------------------

  /** The state the hub confirmed (read-only: change it with publish()). Mutated in place. */
  get state() {
    return this.mirror.state;
  }

  /** The messages, in AG-UI wire form (read-only). Mutated in place. */
  get messages() {
    return this.mirror.messages.items;
  }

  /** The position of the last event applied (or of the last sync). */
  get seq() {
    return this.mirror.seq;
  }

  get epoch() {
    return this.mirror.epoch;
  }

  /**
   * False while waiting for a snapshot (after a join, a gap or a failed patch), and between a
   * repair's STATE_SNAPSHOT and the MESSAGES_SNAPSHOT that follows it.
   */
  get inSync() {
    return this.mirror.awaiting === null && !this.mirror.partial;
  }

  /** How far behind the hub's known position this copy is, in events. */
  get lag() {
    return Math.max(0, this.head - this.mirror.seq);
  }

  /** hub.resync requests this client sent, by reason (`gap`, `patch_failed`). */
  get resyncs() {
    return this.mirror.resyncs;
  }

  /** Edits sent or queued that the hub has not answered yet, oldest first. */
  get pending() {
    return this._edits.pending.map(({ id, event }) => ({ id, event }));
  }

  /** The confirmed state with the pending edits applied: what the UI should show. */
  get optimisticState() {
    const key = `${this._stateVersion}/${this._edits.version}`;
    if (this._overlay.key !== key) this._overlay = { key, value: this._edits.overlay(this.state) };
    return this._overlay.value;
  }

  /**
   * The WebSocket of the current connection, if any; with `transport: "sse"`, the EventStream
   * (sse.js) whose `source` is the EventSource.
   */
  get socket() {
    return this._ws;
  }

  /** Resolves when connected and in sync at position `seq` or later. */
  whenSynced(seq = 0, options) {
    return this.waitFor((c) => c.status === "open" && c.inSync && c.seq >= seq, options);
  }

  describe() {
    return `thread ${this.thread}, seq ${this.seq}, ${this.status}${this.inSync ? "" : ", waiting for a snapshot"}`;
  }

  // -- lifecycle --------------------------------------------------------------------------------

  /**
   * Start connecting (done by the constructor unless `autoConnect: false`). Resolves with the
   * welcome of the first connection; failed attempts are retried with backoff. Rejects if the
   * client is closed first, the hub refuses for good, or `maxRetries` attempts fail.
   */
  connect() {
    if (this._closing) return Promise.reject(new Error("this HubClient is closed"));
    if (this._ready === null) {
      let resolve, reject;
      const promise = new Promise((res, rej) => ((resolve = res), (reject = rej)));
      this._ready = { promise, resolve, reject, settled: false };
      this._open();
    }
    return this._ready.promise;
  }

  /** Close for good: no reconnect; edits not answered yet settle as `unknown`/`cancelled`. */
  close() {
    if (this._closed) return this._closed;
    this._closing = true;
    for (const name of Object.keys(this._timers)) this._clear(name);
    this._edits.cancelAll();
    this._runs.cancelAll();
    this._settleReady(new Error("this HubClient was closed"));
    const ws = this._ws;
    if (ws === null || ws.readyState === 3) {
      this._ws = null;
      this._setStatus("closed", { final: true });
      this._closed = Promise.resolve();
      return this._closed;
    }
    this._closed = new Promise((resolve) => {
      this._whenClosed = resolve;
      // A peer that never answers the close handshake cannot hold us: drop it after 2 s.
      this._timer("close", 2_000, () => {
        ws.terminate?.();
        if (ws === this._ws) this._onClose({ code: 1006 });
      });
      try {
        ws.close(1000, "client closed");
      } catch {
        this._onClose({ code: 1006 });
      }
    });
    return this._closed;
  }

  /**
   * Drop the connection as a network failure would (no close handshake where the WebSocket
   * allows it), then reconnect and resume with `since` as after any disconnect.
   */
  disconnect() {
    const ws = this._ws;
    if (ws === null) return;
    if (typeof ws.terminate === "function") ws.terminate();
    else ws.close(CLOSE_RECONNECT, "reconnecting");
  }

  async _open() {
    if (this._closing || this._connecting) return;
    this._connecting = true;
    this._setStatus("connecting");
    let ws;
    let url;
    let token;
    try {
      token = typeof this.token === "function" ? await this.token() : this.token;
    } catch (err) {
      // Getting a token may fail for a while (its server is down): try again later.
      this._connecting = false;
      this._warn(`the token function failed: ${err?.message ?? err}`);
      this._retry(1006, "no token");
      return;
    }
    try {
      if (this.encoding === "msgpack") this._msgpack ??= await loadMsgpack();
      const [since, epoch] = this.mirror.resumePosition();
      url = this.transport === "sse" ? eventsUrl(this.url) : new URL(this.url);
      if (since !== null) {
        url.searchParams.set("since", String(since));
        url.searchParams.set("epoch", epoch);
      }
      if (token) url.searchParams.set(TOKEN_PARAM, token);
      if (this._closing) return;
      const protocols = this.encoding === "msgpack" ? [MSGPACK_SUBPROTOCOL] : undefined;
      if (this.transport === "sse") ws = new EventStream(url.href, this.EventSource);
      else ws = protocols ? new this.WebSocket(url.href, protocols) : new this.WebSocket(url.href);
      ws.binaryType = "arraybuffer";
      this._askedSince = since !== null;
      this._heldEpoch = this.mirror.epoch;
    } catch (err) {
      this._fail(err); // a bad URL, a WebSocket that cannot be built: a retry will not help
      return;
    } finally {
      this._connecting = false;
    }
    this._ws = ws;
    this._welcomed = false;
    this._fatal = null;
    ws.onopen = () => {
      if (ws !== this._ws) return;
      if (this.encoding === "msgpack" && ws.protocol !== MSGPACK_SUBPROTOCOL) {
        this._fatal = new Error("the hub did not accept the agui-hub.msgpack subprotocol");
        ws.close(1000, "subprotocol refused");
      }
    };
    ws.onmessage = (message) => {
      if (ws === this._ws) this._onData(ws, message.data);
    };
    ws.onerror = () => {}; // a close event follows
    ws.onclose = (event) => {
      if (ws === this._ws) this._onClose(event);
    };
    ws.onreconnecting = (wasOpen) => {
      if (ws === this._ws) this._onStreamLost(ws, wasOpen);
    };
    this._watchOpen(ws);
  }

  /** No welcome within openTimeout: drop this connection and try again. */
  _watchOpen(ws) {
    this._timer("open", this.openTimeout, () => {
      if (ws === this._ws && !this._welcomed) ws.close(CLOSE_RECONNECT, "no welcome");
    });
  }

  /**
   * SSE: the stream ended or broke and the EventSource reconnects by itself, with Last-Event-ID,
   * the position of the last event it took. That resumes this copy only if the copy is whole
   * and at that position: not while it waits for a snapshot or holds half a repair (the source
   * may then hold an older id); then it is dropped, and a new stream opened for a fresh join.
   */
  _onStreamLost(ws, wasOpen) {
    if (!this._welcomed) {
      // An attempt failed; the source tries again. Give up after maxRetries in a row.
      if (this._attempt++ >= this.maxRetries) ws.close(CLOSE_RECONNECT, "no connection");
      return;
    }
    this._welcomed = false;
    this._clear("idle");
    this._clear("ack");
    this.closeCodes.push(1006);
    this._edits.disconnected();
    if (this.mirror.awaiting !== null || this.mirror.partial) {
      ws.close(CLOSE_RECONNECT, "rejoining");
      return;
    }
    this._askedSince = this.mirror.resumePosition()[0] !== null;
    this._heldEpoch = this.mirror.epoch;
    this._setStatus("closed", { code: 1006, reason: "stream lost", willReconnect: true, retryIn: null, wasOpen });
    this._setStatus("connecting");
    this._watchOpen(ws);
  }

  /** SSE: a copy that needs repairing rejoins from scratch (an event stream cannot send). */
  _rejoin(reason) {
    const ws = this._ws;
    if (ws === null || this._closing) return;
    this._rejoinFor = reason;
    ws.close(CLOSE_RECONNECT, `rejoining (${reason})`);
  }

  _onClose(event) {
    this._ws = null;
    this._clear("open");
    this._clear("idle");
    this._clear("ack");
    const code = event?.code ?? 1006;
    this._edits.disconnected();
    this._runs.disconnected();
    if (this._closing) {
      this._clear("close");
      this._setStatus("closed", { code, final: true });
      this._whenClosed?.();
      return;
    }
    this.closeCodes.push(code);
    if (this._fatal) {
      this._fail(this._fatal, code);
      return;
    }
    this._retry(code, event?.reason ?? "");
  }

  /** Try again after the next backoff delay, or give up after maxRetries attempts. */
  _retry(code, reason) {
    if (this._closing) return;
    const attempt = this._attempt++;
    if (attempt >= this.maxRetries) {
      this._fail(new Error(`gave up connecting after ${attempt} attempts`), code);
      return;
    }
    const retryIn = backoffDelay(attempt, this.backoff);
    this._setStatus("closed", { code, reason, willReconnect: true, retryIn });
    this._timer("retry", retryIn, () => this._open(), { keepAlive: true });
  }

  _fail(err, code) {
    this._closing = true;
    this._edits.cancelAll();
    this._runs.cancelAll();
    this._settleReady(err);
    this._setStatus("closed", { code, error: err, final: true });
  }

  _settleReady(err, welcome) {
    const ready = this._ready;
    if (ready === null || ready.settled) return;
    ready.settled = true;
    if (err) ready.reject(err);
    else ready.resolve(welcome);
  }

  _setStatus(status, detail = {}) {
    const changed = status !== this.status;
    this.status = status;
    if (changed || detail.willReconnect || detail.final) this._emit("status", status, detail);
    this._wake();
  }

  _timer(name, ms, fn, { keepAlive = false } = {}) {
    this._clear(name);
    if (!(ms > 0) || ms === Infinity) return;
    const timer = setTimeout(() => {
      this._timers[name] = null;
      fn();
    }, ms);
    if (!keepAlive) timer.unref?.(); // Node: housekeeping timers never hold the process open
    this._timers[name] = timer;
  }

  _clear(name) {
    clearTimeout(this._timers[name]);
    this._timers[name] = null;
  }

  // -- frames -----------------------------------------------------------------------------------

  _onData(ws, data) {
    let frame;
    try {
      frame = decodeFrame(data, this._msgpack);
    } catch (err) {
      this._warn(`undecodable frame: ${err.message}`);
      return;
    }
    this._lastFrame = Date.now();
    if (this._timers.idle === null) this._watchIdle(this.idleTimeout);
    if (!this._welcomed) {
      this._onHandshake(ws, frame);
      return;
    }
    if (this.transport === "sse" && hubControl(frame)?.[0] === "hub.welcome") {
      // A new connection of the EventSource that said nothing of losing the last one.
      this._onStreamLost(ws, true);
      if (!this._welcomed && ws === this._ws && ws.readyState !== 3) this._onHandshake(ws, frame);
      this._wake();
      return;
    }
    try {
      this._onFrame(frame);
    } catch (err) {
      // A bug here must not leave a silently wrong copy: say so, and ask for a fresh snapshot.
      this._warn(`frame ${frame?.type} could not be handled: ${err?.message ?? err}`);
      for (const command of this.mirror.resync("patch_failed").send) this._send(command);
    }
    this._wake();
  }

  /** Drop a connection that has said nothing for idleTimeout (one timer, re-armed lazily). */
  _watchIdle(ms) {
    this._timer("idle", ms, () => {
      const quiet = Date.now() - this._lastFrame;
      if (quiet >= this.idleTimeout) this.disconnect();
      else this._watchIdle(this.idleTimeout - quiet);
    });
  }

  _onHandshake(ws, frame) {
    const control = hubControl(frame);
    if (control?.[0] === "hub.welcome" && control[1] && typeof control[1] === "object") {
      this._onWelcome(control[1], frame);
      return;
    }
    if (control?.[0] === "hub.error") {
      this._noteError(control[1]);
      if (!RETRYABLE_CODES.has(control[1]?.code)) {
        this._fatal = new Error(`the hub refused: ${control[1]?.code}: ${control[1]?.message}`);
      }
    } else {
      this._fatal = new Error(`expected hub.welcome first, got ${frame.type}`);
    }
    ws.close(this._fatal ? 1000 : CLOSE_RECONNECT, "no welcome");
  }

  _onWelcome(value, frame) {
    this._welcomed = true;
    this._clear("open");
    const resumed = this._askedSince && value.resumed !== false;
    if (this._askedSince && value.resumed === false) {
      this._joinCause = value.epoch !== this._heldEpoch ? "epoch_changed" : "resume_too_old";
    } else {
      this._joinCause = this._rejoinFor ?? "join";
    }
    this._rejoinFor = null;
    this.mirror.connected(resumed);
    this.mirror.receive(frame);
    this.welcome = value;
    if (Number.isInteger(value.seq)) this._sawHead(value.seq, value.epoch);
    if (this._everOpen) this.reconnects++;
    this._everOpen = true;
    this._attempt = 0;
    this._emit("welcome", value);
    this._setStatus("open", { resumed: value.resumed === true, node: value.node });
    this._edits.connected();
    this._runs.connected();
    this._settleReady(null, value);
    this._report();
  }

  _onFrame(frame) {
    const position = positionOf(frame);
    const control = hubControl(frame);
    if (position !== null) this._sawHead(position.seq, position.epoch);
    else if (control?.[0] === "hub.heartbeat" && Number.isInteger(control[1]?.seq)) {
      this._sawHead(control[1].seq, control[1].epoch);
    }
    const awaiting = this.mirror.awaiting;
    const openRun = this.mirror.runId;
    const step = this.mirror.receive(frame);
    // The echo of an edit in flight settles it, whether or not this copy could apply it now.
    if (position !== null && !position.sync) this._edits.sawSequenced(frame, position.seq);
    for (const command of step.send) {
      this._send(command);
      if (command.type === "hub.resync") {
        this._emit("resync", { reason: command.reason, counts: { ...this.resyncs } });
      }
    }
    if (frame?.type === "RUN_FINISHED" || frame?.type === "RUN_ERROR") {
      this._runs.sawEnd(frame.runId ?? openRun, frame);
    }
    if (step.error !== null) this._onHubError(step.error);
    if (step.control !== null) {
      if (step.control[0] === "hub.run") this._runs.sawStarted(step.control[1]);
      this._emit("control", { name: step.control[0], value: step.control[1] });
    }
    if (step.applied !== null) this._onApplied(step.applied, position, awaiting);
    this._report();
  }

  _onApplied(event, position, awaiting) {
    const type = event.type;
    if (position?.sync && type === "STATE_SNAPSHOT") {
      let cause = awaiting ?? (this._conflictPending ? "conflict" : "unrequested");
      if (cause === "join") cause = this._joinCause;
      this._conflictPending = false;
      this.snapshots[cause] = (this.snapshots[cause] ?? 0) + 1;
      this._emit("snapshot", { cause, seq: position.seq, counts: { ...this.snapshots } });
    }
    this._emit("event", event);
    if (STATE_EVENTS.has(type)) {
      this._stateVersion++;
      this._emit("state", this.state, event);
    }
    if (MESSAGE_EVENTS.has(type)) this._emit("messages", this.messages, event);
    if (this.ackInterval > 0 && this._timers.ack === null) {
      this._timer("ack", this.ackInterval, () => this.ack());
    }
  }

  _onHubError(value) {
    this._noteError(value);
    if (value?.code === "conflict") {
      this.conflicts++;
      this._conflictPending = true; // the hub sends a snapshot next
    }
    if (this._edits.sawError(value)) return;
    if (value?.code === "conflict") this._emit("conflict", { id: null, ok: false, status: "conflict", ...value });
    else this._runs.sawError(value);
  }

  _noteError(value) {
    this.errors.push(value);
    if (this.errors.length > MAX_KEPT_ERRORS) this.errors.shift();
    this._emit("error", value);
  }

  _sawHead(seq, epoch) {
    if (epoch !== undefined && epoch !== this.mirror.epoch && this.mirror.epoch !== null) {
      this.head = seq; // another history: the old head means nothing
    } else if (seq > this.head) {
      this.head = seq;
    }
  }

  _report() {
    const { seq, epoch } = this.mirror;
    if (seq !== this._reported.seq) {
      this._reported.seq = seq;
      this._emit("seq", { seq, epoch });
    }
    const lag = this.lag;
    if (lag !== this._reported.lag) {
      this._reported.lag = lag;
      this._emit("lag", lag);
    }
  }

  _warn(message) {
    this.warnings.push(message);
    if (this.warnings.length > MAX_KEPT_ERRORS) this.warnings.shift();
    this._emit("warning", message);
  }

  /** Send one command now; false if there is no open connection. */
  _send(command) {
    if (this.transport === "sse") {
      // Nothing goes up an event stream: a repair is a fresh join; acks are not sent.
      if (command.type === "hub.resync") this._rejoin(command.reason);
      return false;
    }
    const ws = this._ws;
    if (ws === null || ws.readyState !== OPEN || !this._welcomed) return false;
    ws.send(encodeFrame(command, this.encoding, this._msgpack));
    return true;
  }

  // -- writing ----------------------------------------------------------------------------------

  /**
   * Propose an edit of the state: a JSON Patch (`ops`) sent as hub.publish. With `test`, `test`
   * operations go first, so that the hub applies the edit only if what it was made against still
   * holds (see README: `true` tests every existing location the edit touches). The confirmed
   * `state` does not change until the hub sequences the edit; `optimisticState` shows it at once.
   *
   * Resolves (never rejects) with the hub's answer: `{ok: true, status: "acked", seq}`, or
   * `{ok: false, status: "conflict" | "rejected", code, message}` (after a conflict the hub sends
   * a fresh snapshot), or `{ok: false, status: "unknown" | "cancelled", reason}` when no answer
   * came (timeout, disconnect, close).
   */
  publish(ops, { test = false, base, metadata, timeout } = {}) {
    this._needSocket("publish");
    checkPatch(ops); // a malformed edit is the caller's bug: throw now
    // Made against what the caller sees: the state with the edits still pending on top (they
    // are applied first, in order; if one of them is refused, this one's premise is gone too).
    const tests = testOps(this.optimisticState, ops, test);
    const event = { type: "STATE_DELTA", delta: [...tests, ...ops] };
    if (metadata) event.metadata = metadata;
    return this._edits.submit(event, base ?? this.seq, timeout);
  }

  /**
   * Propose a whole new state (a STATE_SNAPSHOT). The hub takes it only if `base` (default: the
   * position now) is still the thread's position; otherwise a `conflict`.
   */
  replaceState(snapshot, { base, metadata, timeout } = {}) {
    this._needSocket("replaceState");
    const event = { type: "STATE_SNAPSHOT", snapshot };
    if (metadata) event.metadata = metadata;
    return this._edits.submit(event, base ?? this.seq, timeout);
  }

  /**
   * Have the hub run the upstream agent `agent` (the hub's `--agent NAME=URL`) on this thread,
   * with `messages` (AG-UI messages, e.g. `[{id, role: "user", content}]`: the ones the thread
   * lacks are added to it before the agent answers). The hub posts the thread's state and
   * messages to the agent; its events reach every consumer of the thread, this one included.
   * Resolves with `{threadId, runId}` once the run is open; rejects with a HubRunError whose
   * `code` is the hub's (`run_in_progress`: one run at a time per thread; `unknown_agent`,
   * `forbidden`, `bad_request`), or `timeout` / `disconnected` / `closed`. Waits for the
   * connection if there is none yet.
   */
  run(agent, messages = [], options = {}) {
    return this._runs.run(agent, messages, options);
  }

  /**
   * End the open run `runId` (every consumer gets RUN_ERROR code `cancelled`). Resolves with
   * `{runId, type, code}` once the run has ended (by this cancel, or by itself just before);
   * rejects with a HubRunError (`unknown_run`: it is not the thread's open run).
   */
  cancel(runId, options = {}) {
    return this._runs.cancel(runId, options);
  }

  _needSocket(what) {
    if (this.transport === "sse") {
      throw new Error(`${what}() needs the WebSocket transport: an event stream consumer cannot send edits`);
    }
  }

  /** Tell the hub this client has processed up to `seq` (default: the current position). */
  ack(seq = this.seq) {
    if (seq !== this._acked && this._send({ type: "hub.ack", seq })) this._acked = seq;
  }

  /** Ask the hub for a fresh snapshot, as if this copy had found itself wrong. */
  resync(reason = "patch_failed") {
    for (const command of this.mirror.resync(reason).send) this._send(command);
    this._emit("resync", { reason, counts: { ...this.resyncs } });
  }
}
