// Edits from this client: hub.publish, one at a time, each settled by the hub's answer.
//
// The hub does not number its answers to hub.publish. An accepted edit comes back as a live
// event (its seq is where it landed); a refused one as a hub.error (`conflict`, followed by a
// snapshot; or `malformed_patch`, `bad_request`, `invalid_event`), and the hub sends such replies
// ahead of queued live events. So edits go out one at a time: the next is sent when the hub
// has answered the previous one, which makes every answer unambiguous. The edit carries
// `metadata.edit` (this client's id and a counter), which the hub keeps on the sequenced event,
// so the echo is recognised even among other writers' events. Runs (runs.js) take turns with
// edits for the same reason: one command awaiting an answer at a time.

import { applyPatch, checkPatch, cloneJson, valueAt } from "./patch.js";

/** hub.error codes that say an edit was refused. */
const REFUSALS = new Set(["conflict", "malformed_patch", "bad_request", "invalid_event", "patch_failed"]);

/**
 * The `test` operations for an edit, from the `test` option of HubClient.publish():
 * - `true`: the current value of every existing location the edit touches (`path`, and `from` of
 *   move/copy). A location that does not exist yet is not tested: JSON Patch cannot test absence.
 * - an array of pointers (each tests the current value there; it must exist) and/or ready-made
 *   `{op: "test", path, value}` operations;
 * - an object `{pointer: expectedValue}`.
 * `state` is the state the edit was made against.
 */
export function testOps(state, ops, test) {
  if (!test) return [];
  const current = (path) => {
    const value = valueAt(state, path);
    if (value === undefined) throw new TypeError(`cannot test ${path}: there is no value there`);
    return { op: "test", path, value: cloneJson(value) };
  };
  if (test === true) {
    const seen = new Set();
    const out = [];
    for (const op of ops) {
      if (op.op === "test") continue;
      for (const path of [op.from, op.path]) {
        if (typeof path !== "string" || seen.has(path)) continue;
        seen.add(path);
        const value = valueAt(state, path);
        if (value !== undefined) out.push({ op: "test", path, value: cloneJson(value) });
      }
    }
    return out;
  }
  if (Array.isArray(test)) {
    return test.map((t) => (typeof t === "string" ? current(t) : { ...t, op: "test" }));
  }
  if (typeof test === "object") {
    return Object.entries(test).map(([path, value]) => ({ op: "test", path, value: cloneJson(value) }));
  }
  throw new TypeError("test must be true, an array of pointers or test operations, or an object");
}

export class Edits {
  /**
   * `send(command)` sends a command now (false when not connected); `emit(name, value)` reports
   * to the client's listeners; `timeout` is how long an edit waits for its answer (ms).
   */
  constructor({ send, emit, timeout, busy = () => false, idle = () => {}, turn = null }) {
    this._send = send;
    this._emit = emit;
    /**
     * `busy(turn)`: true while another kind of command (a run, runs.js) waits for its answer,
     * or one asked for before turn `turn` waits to be sent: wait too.
     */
    this._busy = busy;
    /** A counter shared with that other kind, so that all go out in the order asked. */
    this._turn = turn ?? (() => 0);
    /** Called when an edit's answer came, so that other kind of command may go. */
    this._idle = idle;
    this.timeout = timeout;
    this.clientId = Math.random().toString(36).slice(2, 10);
    this._counter = 0;
    this.queue = [];
    this.inflight = null;
    this.open = false;
    this.closed = false;
    /** Bumped whenever the set of pending edits changes. */
    this.version = 0;
  }

  /** The turn of the next edit to send (Infinity: none waits). */
  get nextTurn() {
    return this.queue[0]?.turn ?? Infinity;
  }

  /** Edits not yet answered (sent or waiting to be), oldest first. */
  get pending() {
    return this.inflight ? [this.inflight, ...this.queue] : [...this.queue];
  }

  submit(event, base, timeout = this.timeout) {
    const id = `${this.clientId}-${++this._counter}`;
    const tagged = { ...event, metadata: { ...(event.metadata ?? {}), edit: id } };
    const edit = { id, event: tagged, base, timeout, timer: null, resolve: null, turn: this._turn() };
    const done = new Promise((resolve) => (edit.resolve = resolve));
    if (this.closed) {
      this._finish(edit, { ok: false, status: "cancelled", reason: "closed" });
      return done;
    }
    this.queue.push(edit);
    this.version++;
    this.pump();
    return done;
  }

  /** Send the next edit if the connection is open and nothing is waiting for an answer. */
  pump() {
    if (!this.open || this.inflight !== null || this.queue.length === 0) return;
    if (this._busy(this.queue[0].turn)) return;
    const edit = this.queue.shift();
    const base = typeof edit.base === "function" ? edit.base() : edit.base;
    if (!this._send({ type: "hub.publish", base, event: edit.event })) {
      this.queue.unshift(edit);
      return;
    }
    this.inflight = edit;
    if (edit.timeout > 0) {
      edit.timer = setTimeout(() => {
        if (this.inflight === edit) this.settle({ ok: false, status: "unknown", reason: "timeout" });
      }, edit.timeout);
    }
  }

  /** A sequenced live event arrived: is it the echo of the edit in flight? */
  sawSequenced(frame, seq) {
    const tag = frame?.metadata?.edit;
    if (this.inflight !== null && tag === this.inflight.id) {
      this.settle({ ok: true, status: "acked", seq });
    }
  }

  /** A hub.error arrived; true if it answered the edit in flight. */
  sawError(value) {
    if (this.inflight === null || !REFUSALS.has(value?.code)) return false;
    const status = value.code === "conflict" ? "conflict" : "rejected";
    this.settle({ ok: false, status, code: value.code, message: value.message });
    return true;
  }

  settle(fields) {
    const edit = this.inflight;
    if (edit === null) return;
    this.inflight = null;
    this._finish(edit, fields);
    this.pump();
    this._idle();
  }

  _finish(edit, fields) {
    clearTimeout(edit.timer);
    this.version++;
    const outcome = { id: edit.id, event: edit.event, ...fields };
    if (outcome.status === "conflict") this._emit("conflict", outcome);
    this._emit("publish", outcome);
    edit.resolve(outcome);
  }

  connected() {
    this.open = true;
    this.pump();
  }

  /** The connection is gone: an edit in flight may or may not have been applied. */
  disconnected() {
    this.open = false;
    const edit = this.inflight;
    if (edit !== null) {
      this.inflight = null;
      this._finish(edit, { ok: false, status: "unknown", reason: "disconnected" });
    }
  }

  /** The client is closing: nothing pending will be answered. */
  cancelAll() {
    this.closed = true;
    this.disconnected();
    for (const edit of this.queue.splice(0)) {
      this._finish(edit, { ok: false, status: "cancelled", reason: "closed" });
    }
  }

  /**
   * `state` with every pending edit applied on top (each atomically; one that does not apply is
   * left out), as the UI should show it until the hub answers. Never changes `state`.
   */
  overlay(state) {
    const pending = this.pending;
    if (pending.length === 0) return state;
    const doc = { root: cloneJson(state) };
    for (const { event } of pending) {
      try {
        if (event.type === "STATE_SNAPSHOT") doc.root = cloneJson(event.snapshot);
        else applyPatch(doc, checkPatch(event.delta).ops);
      } catch {
        // This edit will not apply to the hub's state either; it is shown as refused.
      }
    }
    return doc.root;
  }
}
