// AguiHubRunner: CopilotKit's AgentRunner on a real hub process. Two runner objects (A and B,
// as two CopilotKit runtime instances) point at the same hub; A executes a scripted AG-UI agent
// (an AbstractAgent of @ag-ui/client 1.0.0, the version this package builds on; the runner only
// calls runAgent(input, {onEvent}) and abortRun(), which both versions share) and B connects to,
// polls and stops its runs through the hub alone.

import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";

import { AbstractAgent } from "@ag-ui/client";
import WebSocket from "ws";

import { played } from "../test-support/copilotkit-agent.mjs";
import { HUB_BIN, hubMissing, sleep, startHub, threadId } from "../test-support/hub.mjs";

// @copilotkit/runtime reports telemetry unless told not to, and reads that when it is loaded: the
// runtime (and the runner, which imports it) are loaded after this.
process.env.COPILOTKIT_TELEMETRY_DISABLED = "true";
const { AgentRunner, CopilotRuntime, createCopilotRuntimeHandler } = await import("@copilotkit/runtime/v2");
const { AguiHubRunner, THREAD_RUNNING } = await import("../src/copilotkit.js");

const TIMEOUT = 8_000;

/**
 * A scripted agent: RUN_STARTED, a state snapshot, a text message in two chunks, a state delta,
 * a tool call, RUN_FINISHED, `step` ms apart. `pauseAfter` (an event count) holds the run there
 * until resume(); abortRun() ends it as HttpAgent's abort does (an AbortError).
 */
class ScriptedAgent extends AbstractAgent {
  constructor({ step = 15, pauseAfter = null, ...config } = {}) {
    super(config);
    this.step = step;
    this.pauseAfter = pauseAfter;
    this.aborted = false;
    this.emitted = [];
    this._resume = null;
    this._abort = null;
  }

  static script(input) {
    const m = `reply-${input.runId}`;
    const t = `tool-${input.runId}`;
    return [
      { type: "RUN_STARTED", threadId: input.threadId, runId: input.runId },
      { type: "STATE_SNAPSHOT", snapshot: { doc: { title: "Draft" }, words: 0 } },
      { type: "TEXT_MESSAGE_START", messageId: m, role: "assistant" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: m, delta: "Hello" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: m, delta: ", world" },
      { type: "TEXT_MESSAGE_END", messageId: m },
      { type: "STATE_DELTA", delta: [{ op: "replace", path: "/words", value: 2 }] },
      { type: "TOOL_CALL_START", toolCallId: t, toolCallName: "set_title", parentMessageId: m },
      { type: "TOOL_CALL_ARGS", toolCallId: t, delta: '{"title":"Hi"}' },
      { type: "TOOL_CALL_END", toolCallId: t },
      { type: "RUN_FINISHED", threadId: input.threadId, runId: input.runId },
    ];
  }

  run(input) {
    return played(this, ScriptedAgent.script(input), {
      before: async (_event, i) => {
        if (i === this.pauseAfter) await new Promise((res) => (this._resume = res));
        await sleep(this.step);
      },
      sent: (event) => this.emitted.push(event),
    });
  }

  resume() {
    this.pauseAfter = null;
    this._resume?.();
  }

  /** The runtime clones the agent per request: a clone keeps the script's settings, and the
   * original keeps its clones, so a test can resume them or see one aborted. */
  clone() {
    const copy = super.clone();
    Object.assign(copy, { step: this.step, pauseAfter: this.pauseAfter, aborted: false, emitted: [], clones: [] });
    (this.clones ??= []).push(copy);
    return copy;
  }

  resumeClones() {
    for (const copy of this.clones ?? []) copy.resume();
  }

  abortRun() {
    this.aborted = true;
    this._abort?.();
  }
}

const user = (id, content) => ({ id, role: "user", content });

function inputFor(thread, runId, messages) {
  return { threadId: thread, runId, state: {}, messages, tools: [], context: [], forwardedProps: {} };
}

/** Subscribe and record: `seen`, `done` (resolves with the events, or rejects). */
function recording(observable) {
  const seen = [];
  const call = { seen, completed: false };
  call.done = new Promise((resolve, reject) => {
    observable.subscribe({
      next: (event) => seen.push(event),
      error: reject,
      complete: () => {
        call.completed = true;
        resolve(seen);
      },
    });
  });
  return call;
}

async function until(what, probe, timeout = TIMEOUT) {
  const deadline = Date.now() + timeout;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`${what} (after ${timeout} ms)`);
    await sleep(15);
  }
}

/** `promise`, or a rejection after `ms`; the timer does not outlive it. */
function within(promise, what, ms = TIMEOUT) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

const types = (events) => events.map((e) => e.type);
const text = (events) =>
  events
    .filter((e) => e.type === "TEXT_MESSAGE_CONTENT")
    .map((e) => e.delta)
    .join("");

/** Start a run on `runner` of a fresh ScriptedAgent. */
function start(runner, thread, { runId = `run-${Math.random().toString(36).slice(2, 8)}`, ...options } = {}) {
  const messages = [user(`u-${runId}`, "Say hello")];
  const agent = new ScriptedAgent({ threadId: thread, initialMessages: messages, ...options });
  const call = recording(runner.run({ threadId: thread, agent, input: inputFor(thread, runId, messages) }));
  return { agent, call, runId, messages };
}

describe("AguiHubRunner on a real hub", { skip: hubMissing() ?? false }, () => {
  let hub;
  let A;
  let B;
  before(async () => {
    hub = await startHub();
    A = new AguiHubRunner({ url: hub.http, WebSocket });
    B = new AguiHubRunner({ url: hub.http, WebSocket });
  });
  after(async () => {
    await hub?.stop();
  });

  test("is a CopilotKit AgentRunner", () => {
    assert.ok(A instanceof AgentRunner);
  });

  test("run() publishes the agent's run into the thread and emits it; the thread holds it", async () => {
    const thread = threadId("ck-run");
    const { agent, call, runId, messages } = start(A, thread);
    const events = await within(call.done, "the run");
    assert.deepEqual(types(events), types(ScriptedAgent.script({ threadId: thread, runId })));
    assert.equal(events[0].runId, runId);
    assert.equal(text(events), "Hello, world");
    assert.equal(agent.aborted, false);

    const view = await hub.thread(thread);
    assert.equal(view.run, null);
    assert.deepEqual(view.state, { doc: { title: "Draft" }, words: 2 });
    assert.deepEqual(view.messages[0], messages[0], "the user's turn from the input");
    const reply = view.messages[1];
    assert.equal(reply.role, "assistant");
    assert.equal(reply.content, "Hello, world");
    assert.equal(reply.toolCalls[0].function.name, "set_title");
    assert.equal(reply.toolCalls[0].function.arguments, '{"title":"Hi"}');
    assert.equal(await B.isRunning({ threadId: thread }), false);
  });

  test("mid-run, another runner connects: the run so far, then live to RUN_FINISHED; isRunning follows", async () => {
    const thread = threadId("ck-mid");
    const { agent, call, runId } = start(A, thread, { pauseAfter: 4 }); // after the text's "Hello"
    await until("the text so far in the hub", async () => (await hub.thread(thread)).messages.at(-1)?.content === "Hello");
    assert.equal(await B.isRunning({ threadId: thread }), true);

    const joined = recording(B.connect({ threadId: thread }));
    await until("B has the text so far", () => text(joined.seen) === "Hello");
    assert.equal(joined.seen[0].type, "RUN_STARTED");
    assert.equal(joined.seen[0].runId, runId);
    assert.equal(joined.completed, false);
    assert.ok(joined.seen.every((e) => e.metadata?.hub === undefined), "no hub positions");

    agent.resume();
    const seen = await within(joined.done, "B's connect");
    assert.equal(seen.at(-1).type, "RUN_FINISHED");
    assert.equal(seen.at(-1).runId, runId);
    assert.equal(text(seen), "Hello, world");
    assert.ok(types(seen).includes("TOOL_CALL_END"));
    await within(call.done, "A's run");
    assert.equal(await B.isRunning({ threadId: thread }), false);
    assert.equal(await A.isRunning({ threadId: thread }), false);

    // After the run: the compacted history, as one run, and the stream ends.
    const history = await within(recording(B.connect({ threadId: thread })).done, "history");
    assert.deepEqual(types(history), ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]);
    const view = await hub.thread(thread);
    assert.deepEqual(history[1].snapshot, view.state);
    assert.deepEqual(history[2].messages, view.messages);
    assert.equal(view.messages.at(-1).content, "Hello, world");
  });

  test("connect() of a thread nobody wrote completes at once, empty", async () => {
    const seen = await within(recording(B.connect({ threadId: threadId("ck-none") })).done, "connect");
    assert.deepEqual(seen, []);
  });

  test("a second run() while one is open errors with 'Thread already running'", async () => {
    const thread = threadId("ck-twice");
    const first = start(A, thread, { pauseAfter: 2 });
    await until("the run is open", () => B.isRunning({ threadId: thread }));
    // The same runner object: refused at once, as InMemoryAgentRunner does.
    assert.throws(() => start(A, thread), { message: THREAD_RUNNING });
    // Another runner: the hub says a run is open.
    const second = start(B, thread);
    await assert.rejects(within(second.call.done, "B's run"), { message: THREAD_RUNNING });
    assert.equal(second.agent.emitted.length, 0, "B's agent never ran");
    // A runner that missed the open run (the GET raced a start elsewhere): the hub refuses its
    // RUN_STARTED (invalid_sequence), its agent is aborted.
    class Blind extends AguiHubRunner {
      async thread(id) {
        return { ...(await super.thread(id)), run: null };
      }
    }
    const third = start(new Blind({ url: hub.http, WebSocket }), thread);
    await assert.rejects(within(third.call.done, "the blind run"), { message: THREAD_RUNNING });
    assert.equal(third.agent.aborted, true);

    first.agent.resume();
    await within(first.call.done, "the first run");
    assert.equal((await hub.thread(thread)).messages.at(-1).content, "Hello, world");
  });

  test("stop() from another runner ends the run: the agent is aborted, run() completes", async () => {
    const thread = threadId("ck-stop");
    const { agent, call, runId } = start(A, thread, { pauseAfter: 4 });
    await until("the run is open", async () => (await hub.thread(thread)).messages.at(-1)?.content === "Hello");
    const watcher = recording(B.connect({ threadId: thread }));

    assert.equal(await B.stop({ threadId: thread, runId: "not-this-one" }), false);
    assert.equal(await B.isRunning({ threadId: thread }), true, "another run id stops nothing");

    assert.equal(await B.stop({ threadId: thread, runId }), true);
    const events = await within(call.done, "A's run after stop");
    assert.equal(agent.aborted, true);
    const last = events.at(-1);
    assert.equal(last.type, "RUN_ERROR");
    assert.equal(last.code, "cancelled");
    assert.equal(text(events), "Hello");

    const seen = await within(watcher.done, "B's connect");
    assert.equal(seen.at(-1).type, "RUN_ERROR");
    assert.equal(seen.at(-1).code, "cancelled");
    assert.equal(await B.isRunning({ threadId: thread }), false);
    assert.equal(await B.stop({ threadId: thread }), false, "nothing open");
    assert.equal(await B.stop({ threadId: thread, runId }), false, "it ended");

    // The thread goes on: the next run on it (from B this time) opens and finishes.
    const next = start(B, thread);
    await within(next.call.done, "the next run");
    assert.equal((await hub.thread(thread)).messages.at(-1).content, "Hello, world");
  });
});

/**
 * Runner B in a process of its own (another runtime instance): it connects to the thread, and
 * once it has the text so far it asks isRunning() and stops the run; it prints each line of
 * what it saw as JSON and exits when its connect ends.
 */
const OTHER_PROCESS = `
  import WebSocket from "ws";
  const { AguiHubRunner } = await import(process.env.RUNNER_MODULE);
  const [url, threadId] = process.argv.slice(1);
  const runner = new AguiHubRunner({ url, WebSocket });
  const say = (line) => process.stdout.write(JSON.stringify(line) + "\\n");
  let text = "";
  let asked = false;
  runner.connect({ threadId }).subscribe({
    next: async (event) => {
      say({ event });
      if (event.type === "TEXT_MESSAGE_CONTENT") text += event.delta;
      if (text === "Hello" && !asked) {
        asked = true;
        say({ running: await runner.isRunning({ threadId }) });
        say({ stopped: await runner.stop({ threadId }) });
      }
    },
    error: (err) => { say({ error: String(err) }); process.exit(1); },
    complete: () => { say({ complete: true }); process.exit(0); },
  });
`;

function otherProcess(url, thread) {
  const here = dirname(fileURLToPath(import.meta.url));
  const child = spawn(process.execPath, ["--input-type=module", "-e", OTHER_PROCESS, url, thread], {
    cwd: join(here, ".."),
    env: { ...process.env, RUNNER_MODULE: new URL("../src/copilotkit.js", import.meta.url).href },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  child.stdout.on("data", (chunk) => (out += chunk));
  child.stderr.on("data", (chunk) => (err += chunk));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), TIMEOUT);
    child.on("error", reject);
    child.on("exit", (code) => {
      clearTimeout(timer);
      if (code !== 0) reject(new Error(`the other process exited ${code}:\n${out}\n${err}`));
      else resolve(out.trim().split("\n").map((line) => JSON.parse(line)));
    });
  });
}

describe("AguiHubRunner in two processes", { skip: hubMissing() ?? false }, () => {
  let hub;
  before(async () => {
    hub = await startHub();
  });
  after(async () => {
    await hub?.stop();
  });

  test("a runner in another process connects mid-run, sees it running and stops it", async () => {
    const thread = threadId("ck-proc");
    const A = new AguiHubRunner({ url: hub.http, WebSocket });
    const { agent, call, runId } = start(A, thread, { pauseAfter: 4 });
    await until("the text so far in the hub", async () => (await hub.thread(thread)).messages.at(-1)?.content === "Hello");
    const lines = await otherProcess(hub.http, thread);
    const events = lines.filter((l) => l.event).map((l) => l.event);
    assert.equal(events[0].type, "RUN_STARTED");
    assert.equal(events[0].runId, runId);
    assert.deepEqual(lines.filter((l) => "running" in l || "stopped" in l), [{ running: true }, { stopped: true }]);
    assert.equal(events.at(-1).type, "RUN_ERROR");
    assert.equal(events.at(-1).code, "cancelled");
    assert.deepEqual(lines.at(-1), { complete: true });

    const seen = await within(call.done, "A's run");
    assert.equal(agent.aborted, true);
    assert.equal(seen.at(-1).code, "cancelled");
    assert.equal((await hub.thread(thread)).run, null);
  });
});

describe("AguiHubRunner when its watch of the thread drops", { skip: hubMissing() ?? false }, () => {
  let hub;
  before(async () => {
    hub = await startHub();
  });
  after(async () => {
    await hub?.stop();
  });

  test("a stop made while the watch was away is replayed to it, and ends the run", async () => {
    const thread = threadId("ck-rewatch");
    const A = new AguiHubRunner({ url: hub.http, WebSocket });
    const B = new AguiHubRunner({ url: hub.http, WebSocket });
    const { agent, call, runId } = start(A, thread, { pauseAfter: 4 });
    await until("the text so far in the hub", async () => (await hub.thread(thread)).messages.at(-1)?.content === "Hello");
    const run = A._runs.get(thread);
    const closed = new Promise((res) => run.watcher.once("close", res));
    run.watcher.terminate(); // the watch alone drops (the producer's connection stays)
    await closed; // it is reopened 250 ms later: the stop happens while it is away
    assert.equal(await B.stop({ threadId: thread, runId }), true);
    const seen = await within(call.done, "A's run");
    assert.equal(agent.aborted, true);
    assert.equal(seen.at(-1).type, "RUN_ERROR");
    assert.equal(seen.at(-1).code, "cancelled", "the hub's own RUN_ERROR, replayed");
    assert.equal(text(seen), "Hello");
    assert.deepEqual(run.watches, [{ resumed: false }, { resumed: true }], "reopened with since/epoch");
  });
});

describe("AguiHubRunner on a hub that needs tokens", { skip: hubMissing() ?? false }, () => {
  const dir = mkdtempSync(join(tmpdir(), "agui-copilotkit-"));
  const secret = join(dir, "secret");
  writeFileSync(secret, "a test secret that is long enough for HS256 signing", { mode: 0o600 });
  const mint = (scope, thread) =>
    execFileSync(HUB_BIN, ["token", "--secret-file", secret, "--tenant", "t1", "--sub", "rt", "--scope", scope, "--threads", thread], {
      encoding: "utf8",
    }).trim();
  let hub;
  before(async () => {
    hub = await startHub(["--jwt-secret-file", secret]);
  });
  after(async () => {
    await hub?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("a token goes on every call; without one, run() and isRunning() are refused", async () => {
    const thread = threadId("ck-token");
    const token = mint("read,write,agent", thread); // agent: the agent WebSocket
    const runner = new AguiHubRunner({ url: hub.http, token, WebSocket });
    const { call } = start(runner, thread);
    await within(call.done, "the run");
    assert.equal(await runner.isRunning({ threadId: thread }), false);
    const history = await within(recording(runner.connect({ threadId: thread })).done, "history");
    assert.equal(history[2].messages.at(-1).content, "Hello, world");

    const anonymous = new AguiHubRunner({ url: hub.http, WebSocket });
    await assert.rejects(anonymous.isRunning({ threadId: thread }), { status: 401 });
    await assert.rejects(within(start(anonymous, thread).call.done, "anonymous run"), /401/);
  });
});

/** An SSE response's events as they come: `seen`, and `done` (all of them, at the end). */
function sseEvents(response) {
  const seen = [];
  const decoder = new TextDecoder();
  let buffer = "";
  const take = () => {
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).trimStart())
        .join("\n");
      if (data) seen.push(JSON.parse(data));
    }
  };
  const done = (async () => {
    for await (const chunk of response.body) {
      buffer += decoder.decode(chunk, { stream: true });
      take();
    }
    return seen;
  })();
  return { seen, done };
}

describe("CopilotRuntime with AguiHubRunner: two runtime instances, one hub", { skip: hubMissing() ?? false }, () => {
  let hub;
  let agent;
  let one;
  let two;
  const post = (handler, path, body) =>
    handler(
      new Request(`http://runtime.test/api${path}`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      }),
    );
  before(async () => {
    hub = await startHub();
    agent = new ScriptedAgent({ step: 10 });
    const instance = () =>
      createCopilotRuntimeHandler({
        runtime: new CopilotRuntime({
          agents: { default: agent },
          runner: new AguiHubRunner({ url: hub.http, WebSocket }),
        }),
        basePath: "/api",
        activateChannels: false,
      });
    one = instance();
    two = instance();
  });
  after(async () => {
    await hub?.stop();
  });

  test("a run on one instance is connected to, mid-run and after, and stopped, from the other", async () => {
    const thread = threadId("ck-runtime");
    const messages = [user("u-rt-1", "Say hello")];
    agent.pauseAfter = 4;
    const response = await post(one, "/agent/default/run", inputFor(thread, "rt-1", messages));
    assert.equal(response.status, 200);
    assert.match(response.headers.get("content-type"), /text\/event-stream/);
    const run = sseEvents(response);
    await until("the text so far in the hub", async () => (await hub.thread(thread)).messages.at(-1)?.content === "Hello");

    // Instance two: connect mid-run gets the run so far, then the rest.
    const joined = sseEvents(await post(two, "/agent/default/connect", inputFor(thread, "c-1", [])));
    await until("the connect has the text so far", () => text(joined.seen) === "Hello");
    assert.equal(joined.seen[0].type, "RUN_STARTED");
    agent.resumeClones();
    const seen = await within(joined.done, "the connect");
    assert.equal(seen.at(-1).type, "RUN_FINISHED");
    assert.equal(text(seen), "Hello, world");
    const events = await within(run.done, "the run");
    assert.deepEqual(types(events), types(ScriptedAgent.script({ threadId: thread, runId: "rt-1" })));
    const view = await hub.thread(thread);
    assert.deepEqual(view.messages[0], messages[0]);
    assert.equal(view.messages[1].content, "Hello, world");

    // After the run: the history, from instance two.
    const history = await within(sseEvents(await post(two, "/agent/default/connect", inputFor(thread, "c-2", []))).done, "history");
    assert.deepEqual(types(history), ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]);
    assert.deepEqual(history[2].messages, view.messages);

    // The next run, on instance one, stopped from instance two's stop route.
    agent.pauseAfter = 4;
    agent.clones = [];
    const next = [...view.messages, user("u-rt-2", "Again")];
    const second = sseEvents(await post(one, "/agent/default/run", inputFor(thread, "rt-2", next)));
    await until("the second run's text so far", async () => {
      const { run, messages: held } = await hub.thread(thread);
      return run?.runId === "rt-2" && held.at(-1)?.id === "reply-rt-2" && held.at(-1).content === "Hello";
    });
    const refused = await post(two, `/agent/default/stop/${thread}`, { runId: "rt-1" });
    assert.equal((await refused.json()).stopped, false, "not the open run");
    const stopped = await post(two, `/agent/default/stop/${thread}`, {});
    assert.equal((await stopped.json()).stopped, true);
    const ended = await within(second.done, "the stopped run");
    assert.equal(ended.at(-1).type, "RUN_ERROR");
    assert.equal(ended.at(-1).code, "cancelled");
    assert.ok(agent.clones.some((copy) => copy.aborted), "the running clone was aborted");
    const after = await hub.thread(thread);
    assert.equal(after.run, null);
    assert.deepEqual(
      after.messages.slice(-2).map((m) => [m.id, m.content]),
      [["u-rt-2", "Again"], ["reply-rt-2", "Hello"]],
      "the user's turn, and the reply as far as it got",
    );
  });
});
