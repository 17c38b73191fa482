// Runs from this client: hub.run (the hub runs an upstream AG-UI agent on the thread) and
// hub.cancel, each settled by the hub's answer.
//
// The hub answers a hub.run with CUSTOM `hub.run` {threadId, runId} or a hub.error; a hub.cancel
// only with a hub.error (`unknown_run`, ...): when it works, the answer is the run's end, the
// RUN_ERROR (code `cancelled`) every consumer receives. The hub handles one connection's commands
// in order but does not number its answers, and a hub.error does not say which command it
// answers; so a command that expects one goes out only when no other is waiting for its answer
// (an edit of edits.js included: `busy()` says so), which makes every answer unambiguous.

/** hub.error codes that answer an edit, never a run or a cancel. */
const EDIT_CODES = new Set(["conflict", "patch_failed", "malformed_patch", "invalid_event"]);

/**
 * Why a run or a cancel failed. `code` is the hub's hub.error code (`unknown_agent`,
 * `run_in_progress`, `forbidden`, `bad_request`, `unknown_run`, ...), or this client's:
 * `timeout` / `disconnected` (sent, and no answer came: the hub may or may not have done it),
 * `closed` (the client was closed first; a command never sent is not done).
 */
export class HubRunError extends Error {
  /** `value`: the hub's whole error value (`{code, message, ...}`), when the hub answered. */
  constructor(code, message, value = null) {
    super(`${code}: ${message}`);
    this.name = "HubRunError";
    this.code = code;
    this.hubMessage = message;
    this.value = value;
  }
}

/**
 * A run with `resume` came second: another answer took the interrupt first (the hub's 409
 * `interrupt_resolved`: the first answer to a thread's open interrupts wins, on any node), and
 * nothing ran. `interruptId`, `by` (the `sub` of the winner's token; null without tokens) and
 * `at` (RFC 3339) say which, who and when, as the thread's CUSTOM `hub.interrupt_resolved` does.
 */
export class InterruptResolvedError extends HubRunError {
  constructor(code, message, value = null) {
    super(code, message, value);
    this.name = "InterruptResolvedError";
    this.interruptId = value?.interruptId ?? null;
    this.by = value?.by ?? null;
    this.at = value?.at ?? null;
  }
}

/** The error for the hub's refusal `value` of a run or a cancel. */
export function hubRunError(code, message, value = null) {
  const Kind = code === "interrupt_resolved" ? InterruptResolvedError : HubRunError;
  return new Kind(code, message, value);
}

/**
 * The hub.run command for `run(agent, messages, options)`; arguments of the wrong type throw.
 * `resume` (AG-UI 1.0 `RunAgentInput.resume`, `[{interruptId, status, payload}]`) answers the
 * interrupts the thread's last run ended on; sent only when not empty.
 */
export function runCommand(
  agent,
  messages = [],
  { tools = [], context = [], forwardedProps = {}, resume = [] } = {},
) {
  if (typeof agent !== "string" || agent === "") throw new TypeError("run() needs an agent name");
  for (const [name, value] of [
    ["messages", messages],
    ["tools", tools],
    ["context", context],
    ["resume", resume ?? []],
  ]) {
    if (!Array.isArray(value)) throw new TypeError(`run() ${name} must be an array`);
  }
  if (forwardedProps === null || typeof forwardedProps !== "object" || Array.isArray(forwardedProps)) {
    throw new TypeError("run() forwardedProps must be an object");
  }
  const command = { type: "hub.run", agent, messages, tools, context, forwardedProps };
  if (resume?.length) command.resume = resume;
  return command;
}

export class Runs {
  /**
   * `send(command)` sends now (false when not connected); `emit(name, value)` reports to the
   * client's listeners; `busy(turn)` is true while another command (an edit) waits for its
   * answer, or one asked for before turn `turn` waits to be sent; `idle()` is called when this
   * one's answer came (the other queue may go on); `turn()` numbers commands across both, in
   * the order asked; `timeout` (ms) is how long a command waits for its answer once sent.
   */
  constructor({ send, emit, busy, idle, turn, timeout }) {
    this._send = send;
    this._emit = emit;
    this._busy = busy;
    this._idle = idle;
    this._turn = turn;
    this.timeout = timeout;
    this.queue = [];
    this.inflight = null;
    this.open = false;
    this.closed = false;
  }

  /** The turn of the next command to send (Infinity: none waits). */
  get nextTurn() {
    return this.queue[0]?.turn ?? Infinity;
  }

  /** hub.run: resolves with `{threadId, runId}`; rejects with a HubRunError. */
  run(agent, messages = [], options = {}) {
    return this._submit({ kind: "run", command: runCommand(agent, messages, options), timeout: options.timeout });
  }

  /**
   * hub.cancel: resolves once the run has ended, with `{runId, type, code}` (`type`: the ending
   * event, RUN_ERROR with `code` `cancelled` when the cancel ended it; RUN_FINISHED if it ended
   * by itself first); rejects with a HubRunError (`unknown_run`: not the thread's open run).
   */
  cancel(runId, { timeout } = {}) {
    if (typeof runId !== "string" || runId === "") throw new TypeError("cancel() needs a run id");
    return this._submit({ kind: "cancel", runId, command: { type: "hub.cancel", runId }, timeout });
  }

  _submit({ kind, command, runId = null, timeout = this.timeout }) {
    const entry = { kind, command, runId, timeout, timer: null, resolve: null, reject: null, turn: this._turn() };
    const done = new Promise((resolve, reject) => Object.assign(entry, { resolve, reject }));
    if (this.closed) this._finish(entry, new HubRunError("closed", "the client is closed"));
    else {
      this.queue.push(entry);
      this.pump();
    }
    return done;
  }

  /** Send the next command if connected and nothing (here or among the edits) awaits an answer. */
  pump() {
    if (!this.open || this.inflight !== null || this.queue.length === 0) return;
    if (this._busy(this.queue[0].turn)) return;
    const entry = this.queue[0];
    if (!this._send(entry.command)) return;
    this.queue.shift();
    this.inflight = entry;
    if (entry.timeout > 0 && entry.timeout !== Infinity) {
      entry.timer = setTimeout(() => {
        if (this.inflight === entry) this._settle(new HubRunError("timeout", "no answer from the hub"));
      }, entry.timeout);
    }
  }

  /** CUSTOM hub.run arrived: the answer to the run in flight. */
  sawStarted(value) {
    if (this.inflight?.kind !== "run") return false;
    this._settle(null, { threadId: value?.threadId, runId: value?.runId });
    return true;
  }

  /** A hub.error arrived; true if it answered the command in flight. */
  sawError(value) {
    const entry = this.inflight;
    const code = value?.code;
    if (entry === null || EDIT_CODES.has(code)) return false;
    if (entry.kind === "run" && code === "unknown_run") return false; // a late answer to a cancel
    this._settle(hubRunError(String(code), String(value?.message ?? ""), value));
    return true;
  }

  /** A run ended in the thread (`event`: its RUN_FINISHED or RUN_ERROR): settles a cancel of it. */
  sawEnd(runId, event) {
    const entry = this.inflight;
    if (entry?.kind !== "cancel" || entry.runId !== runId) return;
    this._settle(null, { runId, type: event.type, code: event.code ?? null });
  }

  _settle(error, value) {
    const entry = this.inflight;
    if (entry === null) return;
    this.inflight = null;
    this._finish(entry, error, value);
    this.pump();
    this._idle();
  }

  _finish(entry, error, value) {
    clearTimeout(entry.timer);
    const outcome = { kind: entry.kind, command: entry.command, ok: error === null, error, value };
    this._emit(entry.kind === "run" ? "run" : "cancel", outcome);
    if (error) entry.reject(error);
    else entry.resolve(value);
  }

  connected() {
    this.open = true;
    this.pump();
  }

  /** The connection is gone: the command in flight may or may not have been carried out. */
  disconnected() {
    this.open = false;
    const entry = this.inflight;
    if (entry !== null) {
      this.inflight = null;
      this._finish(entry, new HubRunError("disconnected", "the connection dropped before the hub answered"));
      this._idle();
    }
  }

  /** The client is closing: nothing queued will be sent. */
  cancelAll() {
    this.closed = true;
    this.disconnected();
    for (const entry of this.queue.splice(0)) this._finish(entry, new HubRunError("closed", "the client was closed"));
  }
}
