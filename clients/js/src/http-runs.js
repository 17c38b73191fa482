// Runs over plain HTTP, for a client whose events come over an event stream (which cannot send):
// `POST /v1/threads/{id}/runs` starts one (202 `{threadId, runId}`), `DELETE
// /v1/threads/{id}/runs/{runId}` cancels it. The same promises and `run`/`cancel` events as
// runs.js; every request is answered on its own, so they need not take turns.

import { HubRunError, hubRunError, runCommand } from "./runs.js";

/** How many recently ended runs are remembered (a cancel answered after the end was streamed). */
const KEPT_ENDS = 32;

export class HttpRuns {
  /**
   * `url`: the thread's HTTP URL; `fetch`: the Fetch API; `token()`: the bearer token (or null)
   * for a request; `emit(name, value)` reports to the client's listeners; `timeout` (ms): how
   * long a request waits for its answer.
   */
  constructor({ url, fetch, token, emit, timeout }) {
    this.url = url;
    this._fetch = fetch;
    this._token = token;
    this._emit = emit;
    this.timeout = timeout;
    this.closed = false;
    /** For the client's turn-taking with edits, which an event stream cannot send: none. */
    this.inflight = null;
    this.nextTurn = Infinity;
    this._requests = new Set();
    this._ends = new Map();
    this._waiting = new Map();
  }

  /** POST a run: resolves with `{threadId, runId}`; rejects with a HubRunError. */
  run(agent, messages = [], options = {}) {
    const { type, ...body } = runCommand(agent, messages, options);
    const command = { type, ...body };
    const timeout = options.timeout ?? this.timeout;
    return this._settle("run", command, this._request("POST", "/runs", body, timeout).then(({ value }) => ({
      threadId: value?.threadId,
      runId: value?.runId,
    })));
  }

  /**
   * DELETE a run: resolves once it has ended, with `{runId, type, code}`. The hub answers when
   * the run's end is in the thread; this waits (up to the timeout) for the stream to bring it,
   * so the client's copy has it too, and reports the event that ended it.
   */
  cancel(runId, { timeout = this.timeout } = {}) {
    if (typeof runId !== "string" || runId === "") throw new TypeError("cancel() needs a run id");
    const command = { type: "hub.cancel", runId };
    const path = `/runs/${encodeURIComponent(runId)}`;
    const endedBefore = this._ends.has(runId);
    const done = this._request("DELETE", path, undefined, timeout).then(
      () => this._ended(runId, timeout),
      (error) => {
        // It ended by itself while the cancel was on its way: report that end, as runs.js does
        // (a run that had ended before cancel() was called is `unknown_run`).
        const seen = this._ends.get(runId);
        if (error?.code === "unknown_run" && !endedBefore && seen !== undefined) return seen;
        throw error;
      },
    );
    return this._settle("cancel", command, done);
  }

  _settle(kind, command, promise) {
    return promise.then(
      (value) => {
        this._emit(kind, { kind, command, ok: true, error: null, value });
        return value;
      },
      (error) => {
        this._emit(kind, { kind, command, ok: false, error, value: undefined });
        throw error;
      },
    );
  }

  async _request(method, path, body, timeout) {
    if (this.closed) throw new HubRunError("closed", "the client is closed");
    const controller = new AbortController();
    const request = { controller, why: null };
    this._requests.add(request);
    const timer =
      timeout > 0 && timeout !== Infinity
        ? setTimeout(() => {
            request.why = "timeout";
            controller.abort();
          }, timeout)
        : null;
    try {
      const headers = { Accept: "application/json" };
      if (body !== undefined) headers["Content-Type"] = "application/json";
      const token = await this._token();
      if (token) headers.Authorization = `Bearer ${token}`;
      let response;
      try {
        response = await this._fetch(this.url + path, {
          method,
          headers,
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: controller.signal,
        });
      } catch {
        if (request.why === "timeout") throw new HubRunError("timeout", "no answer from the hub");
        if (request.why === "closed") throw new HubRunError("closed", "the client was closed");
        throw new HubRunError("disconnected", "the request failed before the hub answered");
      }
      let value = null;
      try {
        value = await response.json();
      } catch {
        value = null;
      }
      if (response.ok) return { status: response.status, value };
      const code = typeof value?.code === "string" ? value.code : `http_${response.status}`;
      throw hubRunError(code, String(value?.message ?? response.statusText ?? ""), value);
    } finally {
      clearTimeout(timer);
      this._requests.delete(request);
    }
  }

  /** After a cancel was answered: the run's end, once the stream brought it (or the timeout). */
  _ended(runId, timeout) {
    const seen = this._ends.get(runId);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise((resolve) => {
      const fallback = { runId, type: "RUN_ERROR", code: "cancelled" };
      const waiter = { resolve, timer: null };
      if (timeout > 0 && timeout !== Infinity) {
        waiter.timer = setTimeout(() => this._wake(runId, fallback), timeout);
      }
      const list = this._waiting.get(runId) ?? [];
      list.push(waiter);
      this._waiting.set(runId, list);
    });
  }

  _wake(runId, value) {
    for (const waiter of this._waiting.get(runId) ?? []) {
      clearTimeout(waiter.timer);
      waiter.resolve(value);
    }
    this._waiting.delete(runId);
  }

  /** A run ended in the thread (its RUN_FINISHED or RUN_ERROR arrived on the stream). */
  sawEnd(runId, event) {
    if (typeof runId !== "string") return;
    const value = { runId, type: event.type, code: event.code ?? null };
    this._ends.set(runId, value);
    if (this._ends.size > KEPT_ENDS) this._ends.delete(this._ends.keys().next().value);
    this._wake(runId, value);
  }

  // The stream's comings and goings do not concern HTTP requests.
  sawStarted() {
    return false;
  }

  sawError() {
    return false;
  }

  pump() {}

  connected() {}

  disconnected() {}

  /** The client is closing: requests in flight are aborted and reject with `closed`. */
  cancelAll() {
    this.closed = true;
    for (const request of this._requests) {
      request.why = "closed";
      request.controller.abort();
    }
    for (const runId of [...this._waiting.keys()]) this._wake(runId, { runId, type: null, code: "closed" });
  }
}
