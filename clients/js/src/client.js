// HubClient: one thread's state and messages, mirrored over a WebSocket and kept right.
//
// The bookkeeping (positions, gaps, failed patches, snapshots, messages) is the sans-I/O Mirror;
// this module adds the connection to the hub (connection.js: reconnection with `since`, backoff
// with jitter, the handshake and timeouts), edits (hub.publish), acks for the hub's lag metrics,
// and events for the UI.
//
// How frames reach the client, a WebSocket or the thread's event stream (SSE: read-only, runs
// over HTTP, a repair as a fresh join), is transport.js.

import { backoffOptions } from "./backoff.js";
import { checkEncoding } from "./codec.js";
import { Connection } from "./connection.js";
import { Edits, testOps } from "./edits.js";
import { hubControl, MESSAGE_EVENTS, Mirror, positionOf, STATE_EVENTS } from "./mirror.js";
import { Emitter } from "./emitter.js";
import { checkPatch } from "./patch.js";
import { Timers } from "./timers.js";
import { transportFor } from "./transport.js";
import { threadUrl } from "./url.js";

export { CLOSE_RECONNECT, TOKEN_PARAM } from "./connection.js";
export { TRANSPORTS } from "./transport.js";

const MAX_KEPT_ERRORS = 100;

/** The paths a client holds, as given: null, one pointer, or a non-empty array of them. */
function checkPath(path) {
  const paths = Array.isArray(path) ? path : path === null ? [] : [path];
  if (Array.isArray(path) && path.length === 0) throw new TypeError("path: give at least one JSON Pointer");
  for (const p of paths) {
    if (typeof p !== "string") throw new TypeError("path must be a JSON Pointer or an array of them");
  }
  return Array.isArray(path) ? [...path] : path;
}

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
   * @param {string|string[]} [options.path] hold only part of the state: one JSON Pointer
   *   (`/panels/revenue`), and `state` is that subtree; or a few (`["/panels/revenue",
   *   "/series"]`, up to 8), and `state` is their projection (each subtree at its own place,
   *   its ancestors as objects: `{panels: {revenue: …}, series: […]}`); kept by the hub's
   *   filtered frames (docs/protocol.md, "Subscribing to part of the state")
   */
  constructor(options = {}) {
    super();
    const { url, thread } = threadUrl(options.url, options.thread);
    this.url = url.href;
    this.thread = thread;
    this.token = options.token ?? null;
    /**
     * The part of the state this client holds (`?path=`): a JSON Pointer, an array of a few
     * (their projection), or null: the whole state.
     */
    this.path = checkPath(options.path ?? null);
    this.encoding = checkEncoding(options.encoding ?? "json");
    this._transport = transportFor(options, this.encoding);
    /** 'websocket' | 'sse' */
    this.transport = this._transport.name;
    // The constructor in use (the one given, or the global one).
    if (this._transport.WebSocket) this.WebSocket = this._transport.WebSocket;
    else this.EventSource = this._transport.EventSource;
    this.backoff = backoffOptions(options.backoff);
    /** Give up after this many failed connection attempts in a row. */
    this.maxRetries = options.maxRetries ?? Infinity;
    /** ms to wait for hub.welcome after connecting. */
    this.openTimeout = options.openTimeout ?? 10_000;
    /**
     * ms of silence after which the connection is presumed dead (the hub's heartbeat is 15 s).
     * Not over SSE: heartbeats are comments there, which EventSource does not pass on.
     */
    this.idleTimeout = options.idleTimeout ?? this._transport.idleTimeout;
    /** ms between hub.ack reports of the position (0: never; the hub's lag metric uses them). */
    this.ackInterval = options.ackInterval ?? 1_000;
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
    this._runs = this._transport.runs({
      url: this.url,
      token: () => (typeof this.token === "function" ? this.token() : this.token),
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

    this._closing = false;
    this._everOpen = false;
    /** retry, open, idle and close (the connection's), ack (this client's). */
    this._timers = new Timers();
    this._connection = new Connection(this, { msgpack: options.msgpack });
    this._closed = null;
    this._ready = null;
    this._acked = 0;
    this._reported = { seq: this.mirror.seq, lag: 0 };
    this._joinCause = "join";
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
    return this._connection.ws;
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
      this._connection.open();
    }
    return this._ready.promise;
  }

  /** Close for good: no reconnect; edits not answered yet settle as `unknown`/`cancelled`. */
  close() {
    if (this._closed) return this._closed;
    this._closing = true;
    this._timers.clearAll();
    this._edits.cancelAll();
    this._runs.cancelAll();
    this._settleReady(new Error("this HubClient was closed"));
    this._closed = this._connection.close();
    return this._closed;
  }

  /**
   * Drop the connection as a network failure would (no close handshake where the WebSocket
   * allows it), then reconnect and resume with `since` as after any disconnect.
   */
  disconnect() {
    this._connection.disconnect();
  }

  /** The connection is gone (closed, or an event stream lost): nothing in flight is answered. */
  _dropped() {
    this._timers.clear("ack");
    this._edits.disconnected();
    this._runs.disconnected();
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

  // -- frames -----------------------------------------------------------------------------------

  /** A frame after the welcome (connection.js). */
  _receive(frame) {
    try {
      this._onFrame(frame);
    } catch (err) {
      // A bug here must not leave a silently wrong copy: say so, and ask for a fresh snapshot.
      this._warn(`frame ${frame?.type} could not be handled: ${err?.message ?? err}`);
      for (const command of this.mirror.resync("patch_failed").send) this._send(command);
    }
    this._wake();
  }

  /** A welcome (connection.js): `resumed`, or a join caused by `joinCause`. */
  _connected(value, frame, { resumed, joinCause }) {
    this._joinCause = joinCause;
    this.mirror.connected(resumed);
    this.mirror.receive(frame);
    this.welcome = value;
    if (Number.isInteger(value.seq)) this._sawHead(value.seq, value.epoch);
    if (this._everOpen) this.reconnects++;
    this._everOpen = true;
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
    if (this.ackInterval > 0 && !this._timers.has("ack")) {
      this._timers.set("ack", this.ackInterval, () => this.ack());
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
    return this._connection.send(command);
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
   * connection if there is none yet. `options`: `tools`, `context`, `forwardedProps`, `timeout`
   * and `resume` (AG-UI 1.0 `[{interruptId, status, payload}]`, answering the interrupts the
   * thread's last run ended on: the welcome's `interrupts`). The first answer wins, on any node;
   * every consumer sees CUSTOM `hub.interrupt_resolved` (who, when) before the resumed run; a
   * later answer rejects with an InterruptResolvedError (code `interrupt_resolved`, with
   * `interruptId`, `by`, `at`), one to an interrupt not open with code `interrupt_not_open`.
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
    if (!this._transport.canSend) {
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
