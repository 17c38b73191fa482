// HubAgent: the official AG-UI client's AbstractAgent, fed by a hub thread.
//
//   import { HubAgent } from "agui-hub-client/agent";   // src/agent.js
//   import WebSocket from "ws";                           // Node; browsers have their own
//   const agent = new HubAgent({ url: "ws://127.0.0.1:8787", threadId: "doc-1", WebSocket });
//   agent.subscribe({ onStateChanged: ({ state }) => render(state) });
//   await agent.runAgent();                               // watches the thread's current run
//
// An existing AG-UI app swaps its HttpAgent for this and watches the thread through the hub with
// no other change: runAgent() (and connectAgent()) stream the thread's events through the
// official pipeline (verification, chunk transforms, the default reducer, subscribers).
//
// The official client accepts events only inside a run, and the first one must be RUN_STARTED.
// The hub's join prefix starts with RUN_STARTED only when the thread has a run open; events
// outside any run (the join's snapshots on an idle thread, edits published between runs) are
// wrapped here in a synthetic run: RUN_STARTED with the runId runAgent was given, the events,
// then RUN_FINISHED, which is closed before a real RUN_STARTED comes through.
//
// HubHttpAgent: the official HttpAgent on the hub's AG-UI endpoint, no WebSocket. Its run() is
// HttpAgent's (POST /v1/agents/{NAME}); its connect() POSTs the same request to
// /v1/agents/{NAME}/connect, so connectAgent() on a tab that reloads gets the thread's history
// and, if a run is open, follows it to its end:
//
//   import { HubHttpAgent } from "agui-hub-client/agent";
//   const agent = new HubHttpAgent({ url: "http://127.0.0.1:8787/v1/agents/demo", threadId: "doc-1" });
//   await agent.connectAgent();                           // agent.state, agent.messages: the thread's
//
// Unlike the core module (agui-hub.js), this one imports @ag-ui/client and rxjs, so in a
// browser it needs a bundler or an import map.

import {
  AbstractAgent,
  enforceOutgoingInput,
  HttpAgent,
  runHttpRequest,
  transformHttpEventStream,
} from "@ag-ui/client";
import { Observable } from "rxjs";

import { HubClient } from "./client.js";
import { ENDS, FOLLOWED, STARTS } from "./mirror.js";

/** When the stream of one runAgent()/connectAgent() call ends. */
export const UNTIL = ["idle", "run-end", "abort"];

// What a run holds open and must end before RUN_FINISHED (the official verifier refuses it
// otherwise) is what the mirror follows: the streaming items and subagent invocations.

/**
 * Turns the events a HubClient applied into a stream the official client accepts: every event
 * inside a run, runs never overlapping. Pure: push events in, get events out.
 */
export class RunFramer {
  constructor({ threadId, runId, until = "idle", keepHubMetadata = false }) {
    this.threadId = threadId;
    this.keepHubMetadata = keepHubMetadata;
    this.runId = runId ?? `hub-${Math.random().toString(36).slice(2, 10)}`;
    this.until = until;
    /** The run the forwarded stream has open: `{id, synthetic}`, or null. */
    this.run = null;
    /** Items opened by start events in the open run: key -> the event that ends it. */
    this.open = new Map();
    /** Real (hub) runs that ended in the forwarded stream. */
    this.runsEnded = 0;
    /** True once the stream should end (`until: "run-end"` after a run's end). */
    this.done = false;
    this._synthetic = 0;
  }

  /** The events to forward for one event the client applied. */
  push(event) {
    const out = [];
    if (!this.keepHubMetadata) event = withoutHubMetadata(event);
    switch (event.type) {
      case "RUN_STARTED":
        if (this.run?.id === event.runId) return out; // already open here
        if (this.run !== null) out.push(...this._end());
        this.run = { id: event.runId, synthetic: false };
        out.push(event);
        return out;
      case "RUN_FINISHED":
        if (this.run === null) return out; // nothing open here to finish
        if (this.run.synthetic || event.runId !== this.run.id) {
          out.push(...this._end());
        } else {
          out.push(event);
          this._ended();
        }
        return out;
      case "RUN_ERROR":
        if (this.run === null) out.push(this._start());
        out.push(event);
        this._ended();
        return out;
      default:
        if (this.run === null) out.push(this._start());
        this._follow(event);
        out.push(event);
        return out;
    }
  }

  /** The events that close what is open, so the stream can end here. */
  finish() {
    return this.run?.synthetic ? this._end() : [];
  }

  /**
   * The client lost track and joins afresh (a reconnect the hub could not replay): end what is
   * open here, so that the join that follows (its RUN_STARTED, snapshots and re-opened items)
   * starts a clean run. Not counted as the end of a run.
   */
  interrupt() {
    return this.run === null ? [] : this._end(false);
  }

  _start() {
    const runId = this._synthetic === 0 ? this.runId : `${this.runId}-${this._synthetic}`;
    this._synthetic++;
    this.run = { id: runId, synthetic: true };
    return { type: "RUN_STARTED", threadId: this.threadId, runId };
  }

  /** End the open run here: its open items, then RUN_FINISHED. */
  _end(count = true) {
    const out = [...this.open.values()].reverse();
    out.push({ type: "RUN_FINISHED", threadId: this.threadId, runId: this.run.id });
    const real = !this.run.synthetic;
    this.run = null;
    this.open.clear();
    if (real && count) this._countEnd();
    return out;
  }

  _ended() {
    this.run = null;
    this.open.clear();
    this._countEnd();
  }

  _countEnd() {
    this.runsEnded++;
    if (this.until === "run-end") this.done = true;
  }

  _follow(event) {
    const kind = STARTS.get(event.type) ?? ENDS.get(event.type);
    if (kind === undefined) return;
    const [, , end, idField] = FOLLOWED[kind];
    const key = `${kind}:${event[idField]}`;
    if (STARTS.has(event.type)) this.open.set(key, { type: end, [idField]: event[idField] });
    else this.open.delete(key);
  }
}

/**
 * The event without `metadata.hub`: the hub's positions mean nothing to an AG-UI app, and the
 * official client copies a start event's metadata into the message it builds.
 */
export function withoutHubMetadata(event) {
  if (event.metadata?.hub === undefined) return event;
  const { hub: _position, ...metadata } = event.metadata;
  const { metadata: _all, ...rest } = event;
  return Object.keys(metadata).length ? { ...rest, metadata } : rest;
}

export class HubAgent extends AbstractAgent {
  /**
   * @param {object} config AbstractAgent's config (`agentId`, `threadId`, `initialState`, ...)
   *   plus the hub's: `url`, `token`, `encoding`, `WebSocket`, `backoff` (as HubClient; `thread`
   *   is an alias of `threadId`), `hubOptions` (any other HubClient options), and `until`:
   *   - `"idle"` (default): a run ends once the thread has no run open: at once (after the join
   *     snapshots) on an idle thread, or when the run open at join time ends;
   *   - `"run-end"`: after the end of the run open at join time, or else of the next one;
   *   - `"abort"`: only on abortRun() / detachActiveRun().
   *   and `keepHubMetadata` (default false): forward `metadata.hub` (the hub's positions).
   */
  constructor(config = {}) {
    const { url, thread, token, encoding, WebSocket, backoff, hubOptions, ...rest } = config;
    const { until = "idle", keepHubMetadata = false, ...agentConfig } = rest;
    super({ ...agentConfig, threadId: thread ?? agentConfig.threadId });
    if (!UNTIL.includes(until)) throw new TypeError(`until must be one of ${UNTIL.join(", ")}`);
    this.hubOptions = { ...hubOptions, url, token, encoding, WebSocket, backoff };
    this.until = until;
    this.keepHubMetadata = keepHubMetadata;
    this._watches = new Set();
    /** The HubClient of the stream in progress, if any (its counters, its publish()). */
    this.hub = null;
  }

  run(input) {
    return this._watch(input);
  }

  connect(input) {
    return this._watch(input);
  }

  /** End the streams in progress (what is open in a synthetic run is closed first). */
  abortRun() {
    for (const stop of [...this._watches]) stop();
  }

  clone() {
    const copy = super.clone();
    copy.hubOptions = { ...this.hubOptions };
    copy.until = this.until;
    copy.keepHubMetadata = this.keepHubMetadata;
    copy._watches = new Set();
    copy.hub = null;
    return copy;
  }

  _watch(input) {
    return new Observable((subscriber) => {
      const framer = new RunFramer({
        threadId: this.threadId,
        runId: input?.runId,
        until: this.until,
        keepHubMetadata: this.keepHubMetadata,
      });
      const options = Object.fromEntries(Object.entries(this.hubOptions).filter(([, v]) => v !== undefined));
      const client = new HubClient({ ...options, thread: this.threadId, autoConnect: false });
      this.hub = client;
      let over = false;
      let idleCheck = null;

      const end = (err) => {
        if (over) return;
        over = true;
        clearTimeout(idleCheck);
        this._watches.delete(stop);
        if (err) subscriber.error(err);
        else {
          for (const event of framer.finish()) subscriber.next(event);
          subscriber.complete();
        }
        client.close();
      };
      const stop = () => end(null);
      const idle = () =>
        client.status === "open" &&
        client.inSync &&
        client.seq >= (client.welcome?.seq ?? 0) &&
        client.mirror.runId === null &&
        client.mirror.open.size === 0 &&
        framer.open.size === 0;

      client.on("event", (event) => {
        if (over) return;
        for (const out of framer.push(event)) subscriber.next(out);
        if (framer.done) end(null);
        else if (this.until === "idle") {
          // Frames that arrive together are handled together: decide once they all are.
          clearTimeout(idleCheck);
          idleCheck = setTimeout(() => idle() && end(null), 0);
        }
      });
      client.on("welcome", (welcome) => {
        // A reconnect the hub could not replay: a fresh join follows.
        if (!over && client.reconnects > 0 && !welcome.resumed) {
          for (const out of framer.interrupt()) subscriber.next(out);
        }
      });
      client.on("status", (_status, detail) => {
        if (detail.final && !over) end(detail.error ?? new Error("the hub connection closed"));
      });
      this._watches.add(stop);
      client.connect().catch((err) => end(err));
      return () => {
        over = true;
        clearTimeout(idleCheck);
        this._watches.delete(stop);
        client.close();
      };
    });
  }
}

/**
 * The hub's connect endpoint for an agent endpoint URL: `/connect` appended to its path, its
 * query (`?access_token=`) and fragment kept. Relative URLs stay relative.
 */
export function connectUrl(url) {
  const text = String(url);
  const cut = text.search(/[?#]/);
  const path = cut < 0 ? text : text.slice(0, cut);
  const rest = cut < 0 ? "" : text.slice(cut);
  return `${path.replace(/\/+$/, "")}/connect${rest}`;
}

/**
 * The official HttpAgent on the hub's `POST /v1/agents/{NAME}` (config as HttpAgent's: `url`,
 * `headers`, `fetch`, `threadId`, ...), plus AG-UI `connect` over HTTP: connect() POSTs the
 * request run() would (requestInit(input): the same headers, the same fetch) to `${url}/connect`
 * and reads the answer exactly as HttpAgent.run does. The hub answers with the thread's history
 * as one run (an idle thread), or with the open run from its start and then live until it ends,
 * or with nothing (a thread nobody wrote); the stream ends by itself, and connectAgent() with it.
 */
export class HubHttpAgent extends HttpAgent {
  /** Where connect() posts: `${url}/connect`. */
  get connectUrl() {
    return connectUrl(this.url);
  }

  connect(input) {
    return transformHttpEventStream(
      runHttpRequest(() => this.fetch(this.connectUrl, this.requestInit(enforceOutgoingInput(input)))),
      this.debugLogger,
    );
  }

  /** As HttpAgent.runAgent: a fresh AbortController (or the caller's) for this request. */
  connectAgent(parameters, subscriber) {
    this.abortController = parameters?.abortController ?? new AbortController();
    return super.connectAgent(parameters, subscriber);
  }
}
