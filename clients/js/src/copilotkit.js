// AguiHubRunner: a CopilotKit AgentRunner whose threads live in an agui-hub.
//
//   import { CopilotRuntime } from "@copilotkit/runtime/v2";
//   import { AguiHubRunner } from "agui-hub-client/copilotkit";      // src/copilotkit.js
//   import WebSocket from "ws";                                       // Node; browsers have their own
//   const runner = new AguiHubRunner({ url: "http://127.0.0.1:8787", token, WebSocket });
//   new CopilotRuntime({ agents, runner });
//
// Each CopilotKit runtime instance (any number, on any machine) points at any hub node. The
// runtime's agent runs where run() is called, as with CopilotKit's InMemoryAgentRunner, and every
// event it produces is published into the hub thread over the agent WebSocket
// (`/v1/threads/{id}/agent`): the hub holds the thread's state, messages and open run, so every
// other runtime instance can connect() to it (history, or the open run live), ask isRunning(),
// or stop() it.
//
// - run(): the Observable re-emits each of the agent's events once the hub acknowledged it
//   (`hub.ack`); an event the hub refused (`hub.error`) is not in the thread and is not emitted.
//   It completes at the run's RUN_FINISHED or RUN_ERROR. A thread whose run is open (on the hub:
//   `GET /v1/threads/{id}` has `run`, or the hub refuses RUN_STARTED with `invalid_sequence`)
//   errors with `Error("Thread already running")`, as CopilotKit's runners do.
// - The run is watched on the thread's consumer WebSocket: a RUN_ERROR the hub puts in the
//   thread while the agent is still running (`stop()` / `DELETE /v1/threads/{id}/runs/{runId}`
//   from any runner on any node, a superseding run, a lapsed lease) aborts the local agent
//   (`agent.abortRun()`), is emitted, and completes the Observable.
// - connect(): `POST /v1/agents/{agentId}/connect` (agentId defaults to "copilotkit"; the hub
//   does not check it): the thread's history as one run, or the open run from its start and then
//   live until it ends. The hub's `metadata.hub` positions are removed.
// - isRunning(): `GET /v1/threads/{id}` has `run`. stop(): DELETE of that run (or of `runId`).
// - run() with `input.resume` (AG-UI 1.0: answers to the interrupts the thread's last run ended
//   on) for an agent the hub runs itself (`hubAgents`: the CopilotKit agent id -> the hub's
//   `--agent NAME`): the runner does not run the agent; it posts the RunAgentInput to the hub's
//   HttpAgent endpoint (`POST /v1/agents/{NAME}`), so the answer goes through the hub's claim:
//   the first answer wins, on any runtime instance and hub node, and the Observable is the
//   resumed run's stream as that endpoint sends it (without the hub's CUSTOM frames: consumers of
//   the thread see `hub.interrupt_resolved`, right after the resumed RUN_STARTED). A later
//   answer emits RUN_ERROR code `interrupt_resolved` (who answered, when: what a runtime's
//   response carries to the browser) and errors with an InterruptResolvedError (`interruptId`,
//   `by`, `at`), nothing run; a thread with a run open with `Error("Thread already running")`.
//   Without a hub agent for it, the runtime runs the agent itself and the answers go to the hub
//   on the run's RUN_STARTED (`input.resume`), which the hub claims the same way before the run
//   opens: a later answer, on any instance, gets the same RUN_ERROR `interrupt_resolved` and
//   error, and its agent is aborted at its first event.
//   A run refused because another is open, or whose thread is deleted under it, also emits a
//   RUN_ERROR (`run_in_progress`, `thread_deleted`) before it errors: the runtime's response
//   carries that to the browser, where the Observable's error alone would end the stream empty.
// - Threads (CopilotKit's LocalThreadEndpointRunner methods, async here): listThreads(),
//   getThreadMessages(), getThreadEvents(), getThreadState(), updateThread(), deleteThread(),
//   clearThreads(), from the hub's `/v1/threads` API; threadHooks() gives the CopilotRuntimeHooks
//   that serve the runtime's `/threads` routes with them. A thread a run() creates is tagged
//   with its CopilotKit agent (`metadata.copilotkit.agentId`), which the list reports.

import { runHttpRequest, transformHttpEventStream } from "@ag-ui/client";
import { AgentRunner } from "@copilotkit/runtime/v2";
import { Observable, ReplaySubject } from "rxjs";

import { withoutHubMetadata } from "./agent.js";
import { HubRunError, hubRunError } from "./runs.js";
import { THREAD_ID } from "./url.js";

export const THREAD_RUNNING = "Thread already running";

const TERMINAL = new Set(["RUN_FINISHED", "RUN_ERROR"]);

/** The hub's answer to an HTTP call it refused. */
export class HubHttpError extends Error {
  constructor(status, body) {
    const code = body?.error?.code ?? body?.code ?? `http_${status}`;
    super(`the hub answered ${status}: ${body?.error?.message ?? body?.message ?? code}`);
    this.name = "HubHttpError";
    this.status = status;
    this.code = code;
  }
}

function checkThread(threadId) {
  if (typeof threadId !== "string" || !THREAD_ID.test(threadId)) {
    throw new TypeError(`not a thread id: ${JSON.stringify(threadId)} (1-128 of A-Z a-z 0-9 . _ : -)`);
  }
  return threadId;
}

/** `http(s)://` and `ws(s)://` bases of a hub node's address, without a trailing slash. */
export function hubBases(url) {
  if (!url) throw new TypeError("AguiHubRunner needs the url of a hub node (http://host:port)");
  const u = new URL(String(url));
  const ws = new URL(u);
  const http = new URL(u);
  if (u.protocol === "http:" || u.protocol === "ws:") {
    http.protocol = "http:";
    ws.protocol = "ws:";
  } else if (u.protocol === "https:" || u.protocol === "wss:") {
    http.protocol = "https:";
    ws.protocol = "wss:";
  } else {
    throw new TypeError(`the hub url must be http:, https:, ws: or wss:, not ${u.protocol}`);
  }
  for (const x of [ws, http]) {
    x.search = "";
    x.hash = "";
  }
  const strip = (x) => x.toString().replace(/\/+$/, "");
  return { http: strip(http), ws: strip(ws) };
}

export class AguiHubRunner extends AgentRunner {
  /**
   * @param {object} options
   * @param {string} options.url any hub node's base address (`http://127.0.0.1:8787`)
   * @param {string|(() => string|Promise<string>)} [options.token] a bearer token (scopes read and
   *   write); sent as `Authorization` over HTTP and `?access_token=` on WebSockets
   * @param {Function} [options.WebSocket] a WebSocket constructor (Node: the `ws` package)
   * @param {Function} [options.fetch] the Fetch API (default: globalThis.fetch)
   * @param {string} [options.agentId] the agent name connect() posts to when the request has none
   * @param {Record<string,string>|((agent, input) => string|null)} [options.hubAgents] the hub's
   *   name (`--agent NAME=URL`) of a CopilotKit agent, by its agentId: a run with `resume` of
   *   such an agent is the hub's run, through its first-answer-wins claim
   */
  constructor({ url, token, WebSocket, fetch, agentId = "copilotkit", hubAgents = {} } = {}) {
    super();
    const bases = hubBases(url);
    this.httpBase = bases.http;
    this.wsBase = bases.ws;
    this.token = token ?? null;
    this.WebSocket = WebSocket ?? globalThis.WebSocket;
    this.fetch = fetch ?? ((...args) => globalThis.fetch(...args));
    this.agentId = agentId;
    this.hubAgents = hubAgents;
    /** threadId -> the run this runner executes there. */
    this._runs = new Map();
  }

  async _token() {
    return typeof this.token === "function" ? await this.token() : this.token;
  }

  async _headers(extra = {}) {
    const token = await this._token();
    return token ? { ...extra, Authorization: `Bearer ${token}` } : { ...extra };
  }

  async _wsUrl(path) {
    const url = new URL(`${this.wsBase}${path}`);
    const token = await this._token();
    if (token) url.searchParams.set("access_token", token);
    return url.toString();
  }

  /** One HTTP call: `{status, body}` (the body parsed as JSON when it is). */
  async _http(method, path, body) {
    const init = { method, headers: await this._headers(body ? { "Content-Type": "application/json" } : {}) };
    if (body) init.body = JSON.stringify(body);
    let response;
    for (let attempt = 0; ; attempt++) {
      try {
        response = await this.fetch(`${this.httpBase}${path}`, init);
        break;
      } catch (err) {
        // The hub closes HTTP connections after each answer; a pooled one may die as it is
        // reused. Nothing reached the hub then: a GET is tried again at once.
        if (method !== "GET" || attempt > 0) throw err;
      }
    }
    const text = await response.text();
    let parsed = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      // not JSON: kept as text
    }
    return { status: response.status, body: parsed };
  }

  /** The hub's view of a thread: `{threadId, epoch, seq, state, messages, run}`. */
  async thread(threadId) {
    const { status, body } = await this._http("GET", `/v1/threads/${checkThread(threadId)}`);
    if (status !== 200) throw new HubHttpError(status, body);
    return body;
  }

  async isRunning({ threadId }) {
    return (await this.thread(threadId)).run != null;
  }

  async stop({ threadId, runId }) {
    checkThread(threadId);
    if (runId === undefined) {
      runId = (await this.thread(threadId)).run?.runId;
      if (runId == null) return false;
    }
    const { status, body } = await this._http(
      "DELETE",
      `/v1/threads/${threadId}/runs/${encodeURIComponent(runId)}`,
    );
    if (status === 200) return true;
    if (status === 404) return false; // unknown_run: not the open run (it ended, or another one)
    throw new HubHttpError(status, body);
  }

  /** The request's `headers` (the browser's, forwarded by the runtime) are not sent to the hub:
   * the hub is called with this runner's token alone. */
  connect({ threadId, agentId }) {
    checkThread(threadId);
    const url = `${this.httpBase}/v1/agents/${encodeURIComponent(agentId ?? this.agentId)}/connect`;
    return new Observable((subscriber) => {
      const controller = new AbortController();
      const events = transformHttpEventStream(
        runHttpRequest(async () =>
          this.fetch(url, {
            method: "POST",
            headers: await this._headers({
              "Content-Type": "application/json",
              Accept: "text/event-stream",
            }),
            body: JSON.stringify({ threadId }),
            signal: controller.signal,
          }),
        ),
      );
      const subscription = events.subscribe({
        next: (event) => subscriber.next(withoutHubMetadata(event)),
        error: (err) => subscriber.error(err),
        complete: () => subscriber.complete(),
      });
      return () => {
        subscription.unsubscribe();
        controller.abort();
      };
    });
  }

  // ---- Threads: CopilotKit's thread endpoints (`GET /threads`, `.../messages`, `.../events`,
  // `.../state`, `POST /threads/clear`, `PATCH`/`DELETE /threads/{id}`), served from the hub.
  //
  // CopilotKit's LocalThreadEndpointRunner (InMemoryAgentRunner) answers these synchronously from
  // process memory, and the runtime's handlers call them without awaiting. Here every answer comes
  // from the hub over HTTP, so the methods return Promises, and the runtime reaches them through
  // the hooks threadHooks() makes: pass those to createCopilotRuntimeHandler / the Node or Hono
  // listener. Only then does this runner say it serves thread endpoints
  // (`ɵsupportsLocalThreadEndpoints`, which the runtime's /info reports to the browser); without
  // them the runtime answers its thread routes as for any runner without threads (422).

  get ɵsupportsLocalThreadEndpoints() {
    return this._threadRoutes === true;
  }

  /** The CopilotKit agent id of a thread as the hub lists it: what run() recorded in its
   * metadata (`metadata.copilotkit.agentId`, on the thread's first run), else the CopilotKit id
   * of the hub agent that last ran it (`hubAgents`), else the hub's name, else null. */
  _threadAgent(info) {
    const recorded = info?.metadata?.copilotkit?.agentId;
    if (typeof recorded === "string") return recorded;
    if (info?.agent == null) return null;
    if (this.hubAgents && typeof this.hubAgents === "object") {
      for (const [ck, hub] of Object.entries(this.hubAgents)) if (hub === info.agent) return ck;
    }
    return info.agent;
  }

  /** A hub thread as CopilotKit's thread record (LocalThreadEndpointRecord), plus the hub's
   * `metadata` and whether a run is open (`running`). */
  _threadRecord(info) {
    return {
      id: info.id,
      name: info.name ?? null,
      agentId: this._threadAgent(info),
      organizationId: "",
      createdById: "",
      archived: Boolean(info.archived),
      createdAt: info.created,
      updatedAt: info.updated,
      metadata: info.metadata ?? null,
      running: info.run != null,
    };
  }

  /**
   * One page of the token's threads, most recently changed first:
   * `{threads: [record...], nextCursor}` (`GET /v1/threads`; pass `nextCursor` back as `cursor`,
   * null is the end). `agentId` keeps the threads of that CopilotKit agent (filtered here: a page
   * may be short and still have a cursor); archived threads are left out unless
   * `includeArchived`.
   */
  async listThreads({ agentId, includeArchived = false, limit = 50, cursor } = {}) {
    const query = new URLSearchParams({ limit: String(limit) });
    if (cursor) query.set("cursor", cursor);
    if (!includeArchived) query.set("archived", "false");
    const { status, body } = await this._http("GET", `/v1/threads?${query}`);
    if (status !== 200) throw new HubHttpError(status, body);
    let threads = (body.threads ?? []).map((info) => this._threadRecord(info));
    if (agentId) threads = threads.filter((t) => t.agentId === agentId);
    return { threads, nextCursor: body.next_cursor ?? null };
  }

  /** The thread's messages as the hub holds them (`[]` for a thread nobody wrote). */
  async getThreadMessages(threadId) {
    return (await this.thread(threadId)).messages ?? [];
  }

  /** The thread's state, or null for a thread nobody wrote. */
  async getThreadState(threadId) {
    const view = await this.thread(threadId);
    return view.epoch == null ? null : (view.state ?? {});
  }

  /**
   * The thread's events, compacted: a STATE_SNAPSHOT and a MESSAGES_SNAPSHOT of the thread as
   * the hub holds it (its log keeps only the last `--retention` events; its runs are compacted
   * into that outcome), after the open run's RUN_STARTED while one is open; `[]` for a thread
   * nobody wrote.
   */
  async getThreadEvents(threadId) {
    const view = await this.thread(threadId);
    if (view.epoch == null) return [];
    const events = [];
    if (view.run != null) events.push({ type: "RUN_STARTED", threadId, runId: view.run.runId });
    events.push({ type: "STATE_SNAPSHOT", snapshot: view.state ?? {} });
    events.push({ type: "MESSAGES_SNAPSHOT", messages: view.messages ?? [] });
    return events;
  }

  /** Set a thread's `name`, `archived` and/or `metadata` (`PATCH /v1/threads/{id}`): its record,
   * or null if nobody wrote the thread. */
  async updateThread(threadId, changes) {
    const body = {};
    for (const key of ["name", "archived", "metadata"]) if (changes && key in changes) body[key] = changes[key];
    const answer = await this._http("PATCH", `/v1/threads/${checkThread(threadId)}`, body);
    if (answer.status === 404) return null;
    if (answer.status !== 200) throw new HubHttpError(answer.status, answer.body);
    return this._threadRecord(answer.body);
  }

  /** Delete a thread on every hub node (`DELETE /v1/threads/{id}`; an open run is cancelled):
   * true, or false if nobody wrote it. */
  async deleteThread(threadId) {
    const { status, body } = await this._http("DELETE", `/v1/threads/${checkThread(threadId)}`);
    if (status === 204 || status === 200) return true;
    if (status === 404) return false;
    throw new HubHttpError(status, body);
  }

  /** Delete every thread the token lists (of `agentId` when given, archived ones included):
   * the number deleted. The hub's threads are shared by every runtime instance and whatever
   * else writes them: threadHooks() serves `POST /threads/clear` with this only if asked. */
  async clearThreads({ agentId } = {}) {
    let deleted = 0;
    let cursor;
    const seen = new Set();
    do {
      const page = await this.listThreads({ agentId, includeArchived: true, limit: 200, cursor });
      for (const t of page.threads) {
        if (seen.has(t.id)) continue;
        seen.add(t.id);
        if (await this.deleteThread(t.id)) deleted++;
      }
      cursor = page.nextCursor;
    } while (cursor);
    return deleted;
  }

  /**
   * CopilotRuntimeHooks that answer CopilotKit's thread routes from the hub:
   * `createCopilotRuntimeHandler({ runtime, hooks: runner.threadHooks() })` (or the Node/Hono
   * listener's `hooks`). `hooks`: your own hooks, run first (authorize there: the hub is called
   * with this runner's token whoever asks). `clear`: serve `POST /threads/clear` by deleting every
   * thread of the agent asked for (`?agentId=`), or all; off by default (then it deletes nothing,
   * 204, as the runtime does with Intelligence).
   */
  threadHooks({ hooks = {}, clear = false } = {}) {
    this._threadRoutes = true;
    return {
      ...hooks,
      onBeforeHandler: async (ctx) => {
        const replaced = await hooks.onBeforeHandler?.(ctx);
        const request = replaced ?? ctx.request;
        const response = await this._threadRoute(ctx.route, request, { clear });
        if (response) throw response;
        return replaced;
      },
    };
  }

  /** The answer to one of CopilotKit's thread routes, or null (not a thread route). */
  async _threadRoute(route, request, { clear }) {
    const method = route?.method;
    if (typeof method !== "string" || !method.startsWith("threads/")) return null;
    const json = (value, status = 200) => Response.json(value, { status });
    const url = new URL(request.url, "http://localhost");
    const query = url.searchParams;
    const threadId = route.threadId;
    if (threadId !== undefined && (typeof threadId !== "string" || !THREAD_ID.test(threadId))) {
      return json({ error: "Not a thread id" }, 400);
    }
    try {
      switch (method) {
        case "threads/list": {
          const limit = Math.min(200, Math.max(1, Number(query.get("limit")) || 50));
          return json(
            await this.listThreads({
              agentId: query.get("agentId") || undefined,
              includeArchived: query.get("includeArchived") === "true",
              limit,
              cursor: query.get("cursor") || undefined,
            }),
          );
        }
        case "threads/messages":
          return json({ messages: (await this.getThreadMessages(threadId)).map(threadMessage) });
        case "threads/events":
          return json({ events: await this.getThreadEvents(threadId) });
        case "threads/state":
          return json({ state: await this.getThreadState(threadId) });
        case "threads/clear":
          if (clear) await this.clearThreads({ agentId: query.get("agentId") || undefined });
          return new Response(null, { status: 204 });
        case "threads/archive": {
          const record = await this.updateThread(threadId, { archived: true });
          return record ? json({ threadId, archived: true }) : json({ error: "Thread not found" }, 404);
        }
        case "threads/update": {
          if (request.method.toUpperCase() === "DELETE") {
            return (await this.deleteThread(threadId))
              ? json({ threadId, deleted: true })
              : json({ error: "Thread not found" }, 404);
          }
          let body;
          try {
            body = await request.json();
          } catch {
            return json({ error: "Invalid request body" }, 400);
          }
          const record = await this.updateThread(threadId, body ?? {});
          return record ? json(record) : json({ error: "Thread not found" }, 404);
        }
        default:
          return null; // threads/subscribe: realtime metadata is Intelligence's; the runtime answers
      }
    } catch (err) {
      if (err instanceof HubHttpError) return json({ error: err.message, code: err.code }, err.status >= 500 ? 502 : err.status);
      return json({ error: "the hub could not be reached", message: String(err?.message ?? err) }, 502);
    }
  }

  /** The hub's name of `agent` (see `hubAgents`), or null: the runtime runs it. */
  hubAgent(agent, input) {
    const named = this.hubAgents;
    const name = typeof named === "function" ? named(agent, input) : named?.[agent?.agentId];
    return typeof name === "string" && name !== "" ? name : null;
  }

  run({ threadId, agent, input }) {
    checkThread(threadId);
    if (this._runs.has(threadId)) throw new Error(THREAD_RUNNING);
    const hubAgent = input?.resume?.length ? this.hubAgent(agent, input) : null;
    const run =
      hubAgent === null
        ? new HubRun(this, threadId, agent, input)
        : new HubResumedRun(this, threadId, hubAgent, input);
    this._runs.set(threadId, run);
    run.done.finally(() => {
      if (this._runs.get(threadId) === run) this._runs.delete(threadId);
    });
    return run.events.asObservable();
  }
}

/**
 * A run() with `resume` of an agent the hub runs: the RunAgentInput goes to the hub's HttpAgent
 * endpoint, which claims the answers (first wins) and streams the resumed run back.
 */
class HubResumedRun {
  constructor(runner, threadId, hubAgent, input) {
    this.events = new ReplaySubject(Infinity);
    this.done = new Promise((resolve) => (this._resolveDone = resolve));
    const controller = new AbortController();
    const finish = (err) => {
      if (err === undefined) this.events.complete();
      else {
        if (err instanceof HubRunError && err.value !== null) {
          // The hub refused the answer (interrupt_resolved, interrupt_not_open): said to the
          // caller as a RUN_ERROR too, which a runtime's response carries to the browser (the
          // runtime only logs the Observable's error, and its stream ends empty).
          const { code, by, at } = err.value;
          const who = code === "interrupt_resolved" ? ` (by ${by ?? "someone"} at ${at})` : "";
          this.events.next({ type: "RUN_ERROR", message: `${err.hubMessage}${who}`, code });
        }
        this.events.error(err);
      }
      this._resolveDone();
    };
    (async () => {
      const response = await runner.fetch(`${runner.httpBase}/v1/agents/${encodeURIComponent(hubAgent)}`, {
        method: "POST",
        headers: await runner._headers({ "Content-Type": "application/json", Accept: "text/event-stream" }),
        body: JSON.stringify({ ...input, threadId }),
        signal: controller.signal,
      });
      if (!response.ok) {
        let value = null;
        try {
          value = await response.json();
        } catch {
          value = null;
        }
        const code = typeof value?.code === "string" ? value.code : `http_${response.status}`;
        if (code === "run_in_progress") throw new Error(THREAD_RUNNING);
        throw hubRunError(code, String(value?.message ?? response.statusText ?? ""), value);
      }
      await new Promise((resolve, reject) => {
        transformHttpEventStream(runHttpRequest(async () => response)).subscribe({
          next: (event) => this.events.next(withoutHubMetadata(event)),
          error: reject,
          complete: resolve,
        });
      });
    })().then(
      () => finish(),
      (err) => finish(err),
    );
  }
}

/** A message as CopilotKit's `GET /threads/{id}/messages` answers it (its local fallback's
 * shape: an assistant's tool calls as `{id, name, args}`). */
function threadMessage(msg) {
  if (msg.role === "assistant") {
    const toolCalls = msg.toolCalls ?? [];
    return {
      id: msg.id,
      role: msg.role,
      ...(msg.content !== undefined ? { content: msg.content } : {}),
      ...(toolCalls.length > 0
        ? { toolCalls: toolCalls.map((tc) => ({ id: tc.id, name: tc.function.name, args: tc.function.arguments })) }
        : {}),
    };
  }
  if (msg.role === "tool") return { id: msg.id, role: msg.role, content: msg.content, toolCallId: msg.toolCallId };
  return { id: msg.id, role: msg.role, ...("content" in msg && msg.content !== undefined ? { content: msg.content } : {}) };
}

/** Open a WebSocket and wait for its hub.welcome; frames after it go to `onFrame`. */
function openHubSocket(WebSocketImpl, url, onFrame, onClose) {
  return new Promise((resolve, reject) => {
    let ws;
    try {
      ws = new WebSocketImpl(url);
    } catch (err) {
      reject(err);
      return;
    }
    let welcomed = false;
    ws.onmessage = (message) => {
      let frame;
      try {
        frame = JSON.parse(typeof message.data === "string" ? message.data : message.data.toString());
      } catch {
        return;
      }
      if (!welcomed) {
        if (frame.type === "CUSTOM" && frame.name === "hub.welcome") {
          welcomed = true;
          resolve({ ws, welcome: frame.value });
        } else if (frame.type === "CUSTOM" && frame.name === "hub.error") {
          reject(new Error(`the hub refused the connection: ${frame.value?.code} ${frame.value?.message}`));
        }
        return;
      }
      onFrame(frame);
    };
    ws.onerror = () => {
      if (!welcomed) reject(new Error(`could not connect to ${url.replace(/access_token=[^&]*/, "access_token=…")}`));
    };
    ws.onclose = (event) => {
      if (!welcomed) reject(new Error(`the hub closed the connection (${event.code})`));
      else onClose(event);
    };
  });
}

/** One run(): the local agent, its producer socket, and a watch on the thread. */
class HubRun {
  constructor(runner, threadId, agent, input) {
    this.runner = runner;
    this.threadId = threadId;
    this.agent = agent;
    this.input = input;
    this.runId = input?.runId;
    this.events = new ReplaySubject(Infinity);
    /** Frames sent on the producer socket, from index 1: `{event, emit, rejected}`. */
    this.frames = [];
    this.settled = 0; // frames answered (acked or refused) and handled, in order
    this.sentEnd = false; // a RUN_FINISHED or RUN_ERROR was sent
    this.over = false;
    this.producer = null;
    this.watcher = null;
    /** Each watch of the thread opened: `{resumed}` (a reopened one resumes from its position). */
    this.watches = [];
    this.done = new Promise((resolve) => (this._resolveDone = resolve));
    this._start().catch((err) => this._fail(err));
  }

  async _start() {
    const { runner, threadId } = this;
    const WebSocketImpl = runner.WebSocket;
    if (!WebSocketImpl) throw new TypeError("AguiHubRunner needs a WebSocket constructor (Node: the ws package)");
    const view = await runner.thread(threadId);
    if (view.run != null) throw new Error(THREAD_RUNNING);
    this.newThread = view.epoch == null;
    if (this.over) return;
    // The watch first, so that a run ended from elsewhere is seen whenever it happens.
    await this._watch();
    if (this.over) return this._close();
    const { ws, welcome } = await openHubSocket(
      WebSocketImpl,
      await runner._wsUrl(`/v1/threads/${threadId}/agent`),
      (frame) => this._answer(frame),
      (event) => {
        if (!this.over) this._fail(new Error(`the hub closed the agent connection (${event.code} ${event.reason ?? ""})`));
      },
    );
    this.producer = ws;
    if (this.over) return this._close();
    this.threadMessages = welcome?.input?.messages ?? [];
    this._drive();
  }

  /** Run the agent as CopilotKit's InMemoryAgentRunner does: runAgent with an onEvent hook. */
  async _drive() {
    this.driving = true;
    let failure;
    try {
      await this.agent.runAgent(this.input, {
        onEvent: ({ event }) => this._publish(event),
      });
    } catch (err) {
      failure = err;
    }
    if (this.over || this.stopped) return;
    if (!this.sentEnd) {
      // The agent stopped without ending its run: end it in the thread, so it does not hang open.
      const message = failure instanceof Error ? failure.message : failure ? String(failure) : "the agent's run ended without RUN_FINISHED";
      this._send({ type: "RUN_ERROR", message, code: "agent_error" }, true);
    }
  }

  _publish(event) {
    if (this.over || this.stopped || this.sentEnd) return;
    if (event.type === "RUN_STARTED" && event.runId) this.runId = event.runId;
    if (event.type === "RUN_STARTED" && this.input?.resume?.length && !event.input?.resume) {
      // The answers to the thread's interrupts go with the run's start, for the hub to claim.
      event = { ...event, input: this._resumeInput(event) };
    }
    this._send(event, true);
    if (event.type === "RUN_STARTED") {
      // The caller's new messages (the user's turn) are in the input, not in the agent's events:
      // add those the thread lacks, as the hub does for the runs it starts itself.
      const known = new Set(this.threadMessages.map((m) => m.id));
      const missing = (this.input?.messages ?? []).filter((m) => m?.id && !known.has(m.id));
      if (missing.length > 0) {
        this._send({ type: "MESSAGES_SNAPSHOT", messages: [...this.threadMessages, ...missing] }, false);
      }
    }
  }

  /** The RunAgentInput a resumed RUN_STARTED carries: the answers, not the caller's messages
   * (those reach the thread as a MESSAGES_SNAPSHOT, see _publish). */
  _resumeInput(event) {
    const { threadId, runId } = event;
    const given = { threadId, runId, state: {}, messages: [], tools: [], context: [], forwardedProps: {} };
    return { ...given, resume: this.input.resume };
  }

  _send(event, emit) {
    if (TERMINAL.has(event.type)) this.sentEnd = true;
    this.frames.push({ event, emit, rejected: null });
    try {
      this.producer.send(JSON.stringify(event));
    } catch (err) {
      this._fail(err);
    }
  }

  /** The producer socket's answers: refusals (`frame`) and acks (`count`), in frame order. */
  _answer(frame) {
    if (frame.type !== "CUSTOM" || this.over) return;
    if (frame.name === "hub.error") {
      const { code, message } = frame.value ?? {};
      const index = frame.value?.frame;
      const sent = Number.isInteger(index) ? this.frames[index - 1] : undefined;
      if (!sent) {
        const err = new Error(`the hub: ${code}: ${message}`);
        err.code = code;
        this._fail(err);
        return;
      }
      sent.rejected = frame.value;
      if (sent.event.type === "RUN_STARTED") {
        this._abortAgent();
        if (code === "interrupt_resolved" || code === "interrupt_not_open") {
          // Another answer won (or nothing waits for one): said as a RUN_ERROR too, as for
          // the runs the hub starts (see HubResumedRun).
          const err = hubRunError(code, String(message ?? ""), frame.value);
          const { by, at } = frame.value;
          const who = code === "interrupt_resolved" ? ` (by ${by ?? "someone"} at ${at})` : "";
          this.events.next({ type: "RUN_ERROR", message: `${message}${who}`, code });
          this._fail(err);
          return;
        }
        this._fail(
          code === "invalid_sequence" || code === "run_in_progress"
            ? new Error(THREAD_RUNNING)
            : new Error(`the hub refused RUN_STARTED: ${code}: ${message}`),
        );
        return;
      }
      if (TERMINAL.has(sent.event.type) && !this.stopped) {
        // The run's end was refused (e.g. RUN_FINISHED with a message still open): the run would
        // stay open in the thread. End it with RUN_ERROR, once.
        if (sent.event.type === "RUN_FINISHED" && !this._repaired) {
          this._repaired = true;
          this._send({ type: "RUN_ERROR", message: `the hub refused RUN_FINISHED: ${code}: ${message}`, code }, true);
        } else {
          this._fail(new Error(`the hub refused the run's end: ${code}: ${message}`));
        }
      }
      return;
    }
    if (frame.name === "hub.ack") {
      const count = Math.min(frame.value?.count ?? 0, this.frames.length);
      while (this.settled < count && !this.over) {
        const sent = this.frames[this.settled++];
        if (sent.rejected) continue;
        if (sent.emit) this.events.next(sent.event);
        if (sent.event.type === "RUN_STARTED") this._tag();
        if (TERMINAL.has(sent.event.type)) this._finish();
      }
      if (this._ending) this._ended(false);
    }
  }

  /**
   * Watch the thread on a consumer WebSocket. If the watch drops while the run is open, it is
   * opened again with `since`/`epoch` (the hub replays what it missed, a stop included); when the
   * hub cannot replay (a fresh join), the thread's `run` says whether ours is still open.
   */
  async _watch() {
    const path = `/v1/threads/${this.threadId}`;
    const resume = this._position ? `?since=${this._position.seq}&epoch=${encodeURIComponent(this._position.epoch)}` : "";
    const url = await this.runner._wsUrl(path + resume);
    const { ws, welcome } = await openHubSocket(
      this.runner.WebSocket,
      url,
      (frame) => this._watched(frame),
      () => {
        if (!this.over) this._rewatchSoon();
      },
    );
    // (A replayed end may have finished the run already: it comes with the welcome.)
    this.watches.push({ resumed: Boolean(welcome?.resumed) });
    if (this.over) {
      ws.close();
      return;
    }
    this.watcher = ws;
    if (!this._position && welcome?.epoch != null) this._position = { seq: welcome.seq, epoch: welcome.epoch };
    if (resume && !welcome?.resumed && this._started() && !this.sentEnd) {
      const view = await this.runner.thread(this.threadId);
      if (view.run?.runId !== this.runId) {
        this._endedElsewhere({
          type: "RUN_ERROR",
          message: "the run was ended in the hub thread while the watch was away",
          code: "run_ended",
        });
      }
    }
  }

  _rewatchSoon(delay = 250) {
    setTimeout(() => {
      if (this.over) return;
      this._watch().catch(() => this._rewatchSoon(1_000));
    }, delay);
  }

  /** The thread's stream: a run end the hub wrote while our run is open means it was ended. */
  _watched(event) {
    // Every sequenced frame, live or sync, carries the position it brings the watch to.
    const hub = event.metadata?.hub;
    if (Number.isInteger(hub?.seq) && hub.epoch != null) this._position = { seq: hub.seq, epoch: hub.epoch };
    if (this.over || !TERMINAL.has(event.type) || event.metadata?.hub?.sync) return;
    if (this.sentEnd) return; // ours (or after ours)
    if (event.type === "RUN_FINISHED" && event.runId !== this.runId) return;
    // RUN_ERROR carries no runId: any RUN_ERROR while our run is open ends ours (one run at a
    // time per thread).
    if (!this._started()) return;
    this._endedElsewhere(withoutHubMetadata(event));
  }

  _endedElsewhere(event) {
    if (this.over || this.stopped) return;
    this.stopped = true;
    this._abortAgent();
    // What the agent sent before the end is in the thread (or refused): emit it as its acks
    // come, then the end. The hub answers every frame; a second is plenty for the last ack.
    this._ending = { event, target: this.frames.length };
    this._endTimer = setTimeout(() => this._ended(), 2_000);
    this._ended(false);
  }

  /** The run was ended from elsewhere: finish once every frame sent before is answered. */
  _ended(force = true) {
    if (this.over || !this._ending) return;
    if (!force && this.settled < this._ending.target) return;
    clearTimeout(this._endTimer);
    this.events.next(this._ending.event);
    this._finish();
  }

  /**
   * A thread this run created is tagged with the CopilotKit agent that ran it
   * (`metadata.copilotkit.agentId`), which listThreads() reports and filters on: the hub itself
   * knows only the agents it runs. Only a new thread: its metadata is null, nothing is replaced.
   */
  _tag() {
    const agentId = this.agent?.agentId;
    if (!this.newThread || this._tagging || typeof agentId !== "string" || agentId === "") return;
    this._tagging = this.runner
      ._http("PATCH", `/v1/threads/${this.threadId}`, { metadata: { copilotkit: { agentId } } })
      .catch(() => {}); // the run goes on untagged
  }

  _started() {
    return this.frames.some((f) => f.event.type === "RUN_STARTED" && !f.rejected);
  }

  _abortAgent() {
    if (this._aborted || !this.driving) return;
    this._aborted = true;
    try {
      this.agent.abortRun?.();
    } catch (err) {
      console.error("Failed to abort agent run", err);
    }
  }

  _finish() {
    if (this.over) return;
    this.over = true;
    clearTimeout(this._endTimer);
    this._close();
    const complete = () => {
      this.events.complete();
      this._resolveDone();
    };
    // The tag goes with the run: once run() completes, listThreads() shows the thread's agent.
    if (this._tagging) this._tagging.finally(complete);
    else complete();
  }

  _fail(err) {
    if (this.over) return;
    this.over = true;
    this._abortAgent();
    this._close();
    // A refused run, or a thread deleted under it: said as a RUN_ERROR too, which the runtime's
    // response carries to the browser (the runtime only logs the Observable's error, and its
    // stream would end empty).
    if (err?.message === THREAD_RUNNING) {
      this.events.next({ type: "RUN_ERROR", message: THREAD_RUNNING, code: "run_in_progress" });
    } else if (err?.code === "thread_deleted") {
      this.events.next({ type: "RUN_ERROR", message: err.message, code: "thread_deleted" });
    }
    this.events.error(err);
    this._resolveDone();
  }

  _close() {
    for (const ws of [this.producer, this.watcher]) {
      try {
        ws?.close();
      } catch {
        // already closed
      }
    }
  }
}
