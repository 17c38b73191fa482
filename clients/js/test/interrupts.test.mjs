// Answering interrupts (AG-UI 1.0 human in the loop) from the JS client and from the CopilotKit
// runner, against a real hub process that runs a real AG-UI HTTP agent (`ask`): the first answer
// wins, a later one is an InterruptResolvedError saying who answered and when, and every client
// sees CUSTOM hub.interrupt_resolved as a thread event right after the resumed RUN_STARTED.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import WebSocket from "ws";

import { HubClient, HubRunError, InterruptResolvedError } from "../src/agui-hub.js";
import { AgentServer } from "../test-support/agents.mjs";
import { played } from "../test-support/copilotkit-agent.mjs";
import { EventSource } from "../test-support/event-source.mjs";
import { hubMissing, startHub, threadId } from "../test-support/hub.mjs";

process.env.COPILOTKIT_TELEMETRY_DISABLED = "true";
const { AguiHubRunner } = await import("../src/copilotkit.js");
const { CopilotRuntime, createCopilotRuntimeHandler } = await import("@copilotkit/runtime/v2");
const { AbstractAgent } = await import("@ag-ui/client");

/** The runtime's own agent: never to run, the hub runs `ask` for a resume. */
class NotHere extends AbstractAgent {
  run() {
    throw new Error("the answer ran in the runtime");
  }
}

/** An SSE response's `data` events, once it ended. */
async function sseEvents(response) {
  const text = await response.text();
  return text
    .split("\n\n")
    .map((block) => block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n"))
    .filter(Boolean)
    .map((data) => JSON.parse(data));
}

const TIMEOUT = 10_000;
const RESOLVED = "hub.interrupt_resolved";

const clients = [];
const logs = new Map();
function open(hub, thread, options = {}) {
  const client = new HubClient({ url: hub.ws, thread, WebSocket, backoff: { initial: 20, max: 200 }, ...options });
  const log = [];
  client.on("event", (event) => log.push(event));
  logs.set(client, log);
  clients.push(client);
  return client;
}

async function until(what, check) {
  const deadline = Date.now() + TIMEOUT;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function rejection(promise) {
  try {
    await promise;
  } catch (err) {
    return err;
  }
  assert.fail("expected a rejection");
}

/** Every event an Observable emits, and how it ended. */
function recording(observable) {
  const seen = [];
  const done = new Promise((resolve, reject) => {
    observable.subscribe({ next: (e) => seen.push(e), error: reject, complete: () => resolve(seen) });
  });
  return { seen, done };
}

const approve = (thread, payload) => ({ interruptId: `approve-${thread}`, status: "resolved", payload });
/** A RunAgentInput that answers the thread's `approve` interrupt with `payload`. */
const resumeInput = (thread, runId, payload) => ({
  threadId: thread,
  runId,
  state: {},
  messages: [],
  tools: [],
  context: [],
  forwardedProps: {},
  resume: [approve(thread, payload)],
});

describe("interrupts answered from the clients, on a real hub", { skip: hubMissing() ?? false }, () => {
  let hub;
  let agents;
  before(async () => {
    agents = await new AgentServer().start();
    hub = await startHub(["--agent", `ask=${agents.url("ask")}`]);
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await hub?.stop();
    await agents?.close();
  });

  /** Run `ask` on the thread from `client` and wait until the thread waits on its interrupt. */
  async function ask(client, thread) {
    await client.run("ask", []);
    await until("the question", async () => (await hub.thread(thread)).interrupts?.length === 1);
  }

  test("HubClient.run(resume): the first answer wins, over SSE or the WebSocket; later ones are rejected", async () => {
    const thread = threadId("js-ask");
    const ws = open(hub, thread);
    const sse = open(hub, thread, { transport: "sse", EventSource });
    const third = open(hub, thread);
    await Promise.all([ws.whenSynced(), sse.whenSynced(), third.whenSynced()]);
    await ask(ws, thread);

    const answer = approve(thread, "yes");
    const won = await sse.run("ask", [], { resume: [answer] }); // POST .../runs
    for (const late of [ws, third]) {
      const err = await rejection(late.run("ask", [], { resume: [answer] })); // hub.run
      assert.ok(err instanceof InterruptResolvedError && err instanceof HubRunError, String(err));
      assert.equal(err.code, "interrupt_resolved");
      assert.equal(err.interruptId, answer.interruptId);
      assert.equal(err.by, null); // open mode: no token, no sub
      assert.match(err.at, /^\d{4}-\d\d-\d\dT/);
    }
    const view = await until("the resumed run's end", async () => (await hub.thread(thread)).run === null)
      .then(() => hub.thread(thread));
    assert.equal(view.messages.at(-1).content, `answered ${answer.interruptId}=resolved:"yes"`);
    for (const client of [ws, sse, third]) {
      await client.whenSynced(view.seq, { timeout: TIMEOUT });
      const log = logs.get(client);
      const at = log.findIndex((e) => e.type === "CUSTOM" && e.name === RESOLVED);
      assert.ok(at > 0, `${client.transport}: no ${RESOLVED} event`);
      assert.equal(log[at - 1].type, "RUN_STARTED");
      assert.equal(log[at - 1].runId, won.runId);
      assert.equal(log[at].value.interruptId, answer.interruptId);
      assert.deepEqual({ ...client.resyncs }, Object.fromEntries(Object.keys(client.resyncs).map((k) => [k, 0])));
      assert.deepEqual(client.messages, view.messages);
    }
    assert.deepEqual(
      agents.inputs.filter((i) => i.threadId === thread).map((i) => i.resume ?? null),
      [null, [answer]],
    );
    // A late answer over SSE: the hub's 409, the same InterruptResolvedError.
    const lateHttp = await rejection(sse.run("ask", [], { resume: [answer] }));
    assert.ok(lateHttp instanceof InterruptResolvedError, String(lateHttp));
    assert.equal(lateHttp.interruptId, answer.interruptId);
    assert.equal(lateHttp.value.code, "interrupt_resolved");
    const notOpen = await rejection(ws.run("ask", [], { resume: [{ interruptId: "nope", status: "resolved" }] }));
    assert.equal(notOpen.code, "interrupt_not_open");
    assert.ok(!(notOpen instanceof InterruptResolvedError));
  });

  test("AguiHubRunner.run(resume): two runtimes answer at once, the hub runs the agent once", async () => {
    const thread = threadId("ck-ask");
    const watcher = open(hub, thread);
    await watcher.whenSynced();
    await ask(watcher, thread);
    const hubAgents = { assistant: "ask" };
    const A = new AguiHubRunner({ url: hub.http, WebSocket, hubAgents });
    const B = new AguiHubRunner({ url: hub.http, WebSocket, hubAgents });
    // The runtime's own agent must not run: the hub runs `ask` for it.
    const local = { agentId: "assistant", runAgent: () => assert.fail("the answer ran locally") };
    const input = (runId, payload) => resumeInput(thread, runId, payload);
    const runs = [
      recording(A.run({ threadId: thread, agent: local, input: input("ck-a", "from A") })),
      recording(B.run({ threadId: thread, agent: local, input: input("ck-b", "from B") })),
    ];
    const settled = await Promise.allSettled(runs.map((r) => r.done));
    const won = settled.filter((s) => s.status === "fulfilled");
    const lost = settled.filter((s) => s.status === "rejected");
    assert.equal(won.length, 1, JSON.stringify(settled.map((s) => s.reason?.message ?? "ok")));
    const err = lost[0].reason;
    assert.ok(err instanceof InterruptResolvedError, String(err));
    const loser = runs[settled.indexOf(lost[0])].seen;
    assert.deepEqual(loser.map((e) => [e.type, e.code]), [["RUN_ERROR", "interrupt_resolved"]]);
    assert.equal(err.interruptId, `approve-${thread}`);
    const events = won[0].value;
    assert.deepEqual(
      events.map((e) => (e.type === "CUSTOM" ? e.name : e.type)),
      ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"],
    );
    assert.ok(events.every((e) => e.metadata?.hub === undefined), "no hub positions");
    // The thread's consumers see who answered, right after the resumed run's RUN_STARTED.
    const log = logs.get(watcher);
    await until("the watcher's resolution", () => log.some((e) => e.name === RESOLVED));
    const at = log.findIndex((e) => e.type === "CUSTOM" && e.name === RESOLVED);
    assert.equal(log[at - 1].type, "RUN_STARTED");
    assert.equal(log[at - 1].runId, events[0].runId);
    assert.equal(log[at].value.at, err.at);
    const resumed = agents.inputs.filter((i) => i.threadId === thread && i.resume);
    assert.equal(resumed.length, 1, "exactly one resume reached the agent");
    assert.equal(resumed[0].runId, events[0].runId, "the winner's runId");
    const view = await hub.thread(thread);
    assert.equal(view.messages.at(-1).content, `answered approve-${thread}=resolved:${JSON.stringify(resumed[0].resume[0].payload)}`);
    assert.deepEqual(view.interrupts, []);

    // A late answer, after the run: still interrupt_resolved, and the runtime's agent never ran.
    const late = recording(A.run({ threadId: thread, agent: local, input: input("ck-c", "late") }));
    const lateErr = await rejection(late.done);
    assert.ok(lateErr instanceof InterruptResolvedError, String(lateErr));
  });

  test("AguiHubRunner.run(resume) of an agent the runtime runs itself: the hub claims the answer on its RUN_STARTED", async () => {
    const thread = threadId("ck-local");
    const watcher = open(hub, thread);
    await watcher.whenSynced();
    await ask(watcher, thread);
    // No hubAgents: each runtime runs its own agent, which answers in its events.
    const A = new AguiHubRunner({ url: hub.http, WebSocket });
    const B = new AguiHubRunner({ url: hub.http, WebSocket });
    const ran = [];
    class Answering extends AbstractAgent {
      run(input) {
        ran.push(input.runId);
        const m = `m-${input.runId}`;
        const events = [
          { type: "RUN_STARTED", threadId: input.threadId, runId: input.runId },
          { type: "TEXT_MESSAGE_START", messageId: m, role: "assistant" },
          { type: "TEXT_MESSAGE_CONTENT", messageId: m, delta: `resumed by ${input.runId}` },
          { type: "TEXT_MESSAGE_END", messageId: m },
          { type: "RUN_FINISHED", threadId: input.threadId, runId: input.runId },
        ];
        return played(this, events, { before: () => new Promise((r) => setTimeout(r, 5)) });
      }
    }
    const input = (runId, payload) => resumeInput(thread, runId, payload);
    const runs = [
      recording(A.run({ threadId: thread, agent: new Answering({ threadId: thread }), input: input("local-a", "from A") })),
      recording(B.run({ threadId: thread, agent: new Answering({ threadId: thread }), input: input("local-b", "from B") })),
    ];
    const settled = await Promise.allSettled(runs.map((r) => r.done));
    const won = settled.filter((s) => s.status === "fulfilled");
    const lost = settled.filter((s) => s.status === "rejected");
    assert.equal(won.length, 1, JSON.stringify(settled.map((s) => s.reason?.message ?? "ok")));
    const err = lost[0].reason;
    assert.ok(err instanceof InterruptResolvedError, String(err));
    assert.equal(err.interruptId, `approve-${thread}`);
    const loser = runs[settled.indexOf(lost[0])].seen;
    assert.deepEqual(loser.filter((e) => e.type === "RUN_ERROR").map((e) => e.code), ["interrupt_resolved"]);
    const winner = won[0].value.find((e) => e.type === "RUN_STARTED").runId;
    // Who answered, right after the resumed run's RUN_STARTED, for every tab.
    const log = logs.get(watcher);
    await until("the watcher's resolution", () => log.some((e) => e.name === RESOLVED));
    const at = log.findIndex((e) => e.type === "CUSTOM" && e.name === RESOLVED);
    assert.equal(log[at - 1].type, "RUN_STARTED");
    assert.equal(log[at - 1].runId, winner);
    assert.equal(log[at].value.at, err.at);
    // The runner's Observable completes once its events are sent, not stored: wait for the
    // thread to hold the resumed run's message (the run is also closed between the runs).
    const resumedMessage = (v) => v.messages.some((m) => m.id === `m-${winner}`);
    const view = await until("the resumed run's end", async () => {
      const v = await hub.thread(thread);
      return v.run === null && resumedMessage(v);
    }).then(() => hub.thread(thread));
    assert.equal(view.messages.at(-1).content, `resumed by ${winner}`);
    assert.ok(!view.messages.some((m) => m.content === `resumed by ${lost[0] === settled[0] ? "local-a" : "local-b"}`));
    assert.deepEqual(view.interrupts, []);
  });

  test("through two CopilotRuntime instances: a run request with resume is the hub's, first answer wins", async () => {
    const thread = threadId("rt-ask");
    const watcher = open(hub, thread);
    await watcher.whenSynced();
    await ask(watcher, thread);
    const instance = () =>
      createCopilotRuntimeHandler({
        runtime: new CopilotRuntime({
          agents: { default: new NotHere() },
          runner: new AguiHubRunner({ url: hub.http, WebSocket, hubAgents: { default: "ask" } }),
        }),
        basePath: "/api",
        activateChannels: false,
      });
    const body = (runId, payload) => resumeInput(thread, runId, payload);
    const post = (handler, runId, payload) =>
      handler(
        new Request("http://runtime.test/api/agent/default/run", {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify(body(runId, payload)),
        }),
      );
    const [one, two] = [instance(), instance()];
    const streams = await Promise.all([post(one, "rt-1", "one"), post(two, "rt-2", "two")].map(async (r) => sseEvents(await r)));
    const finished = streams.filter((events) => events.some((e) => e.type === "RUN_FINISHED"));
    assert.equal(finished.length, 1, JSON.stringify(streams.map((events) => events.map((e) => e.type))));
    const lost = streams.find((events) => !events.some((e) => e.type === "RUN_FINISHED"));
    // The other browser is told, in its response: the hub's refusal as the stream's RUN_ERROR.
    assert.deepEqual(lost.map((e) => [e.type, e.code]), [["RUN_ERROR", "interrupt_resolved"]]);
    assert.match(lost[0].message, /already answered \(by someone at \d{4}-/);
    const resumed = agents.inputs.filter((i) => i.threadId === thread && i.resume);
    assert.equal(resumed.length, 1, "exactly one resume reached the agent");
    const text = finished[0].find((e) => e.type === "TEXT_MESSAGE_CONTENT").delta;
    assert.equal(text, `answered approve-${thread}=resolved:${JSON.stringify(resumed[0].resume[0].payload)}`);
  });
});
