// CopilotKit on a hub cluster: two CopilotKit runtime processes (@copilotkit/runtime's Node
// listener, each a node process of its own with an AguiHubRunner) on two hub nodes that share a
// real Redis. The browser's side is CopilotKit's own ProxiedCopilotRuntimeAgent (@copilotkit/core,
// the agent its React hooks drive), one per "tab": a tab runs on one runtime and drops, another
// connects through the other runtime; stop and a double run cross runtimes; a runtime process is
// killed mid-run.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { replyText } from "../test-support/copilotkit-agent.mjs";
import { startRuntime } from "../test-support/copilotkit.mjs";
import { hubMissing, sleep, startHub, threadId } from "../test-support/hub.mjs";
import { redisMissing, startRedis } from "../test-support/redis.mjs";

process.env.COPILOTKIT_TELEMETRY_DISABLED = "true";
const { ProxiedCopilotRuntimeAgent } = await import("@copilotkit/core");

const TIMEOUT = 10_000;

async function until(what, probe, timeout = TIMEOUT) {
  const deadline = Date.now() + timeout;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`${what} (after ${timeout} ms)`);
    await sleep(10);
  }
}

function within(promise, what, ms = TIMEOUT) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** A browser tab: CopilotKit's proxy agent for `default` on `runtime`, recording what it sees. */
function tab(runtime, thread) {
  const agent = new ProxiedCopilotRuntimeAgent({
    runtimeUrl: runtime.url,
    agentId: "default",
    threadId: thread,
    transport: "rest",
  });
  const seen = [];
  agent.subscribe({
    onEvent: ({ event }) => {
      seen.push({ ...event, at: Date.now() });
    },
  });
  return { agent, seen, words: () => seen.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").length };
}

/** Start a run of `words` words from a tab; `hangAfter` words then it hangs (until stopped). */
function runFrom(t, runId, forwardedProps) {
  t.agent.addMessage({ id: `u-${runId}`, role: "user", content: "Stream a reply" });
  const controller = new AbortController();
  const result = t.agent.runAgent({ runId, forwardedProps, abortController: controller });
  result.catch(() => {}); // a dropped tab's run rejects or resolves: the test looks at what it saw
  return { controller, result };
}

/** The thread's messages as a client holds them, for comparison: id, role, content, tool calls. */
const shape = (messages) =>
  messages.map((m) => ({
    id: m.id,
    role: m.role,
    content: m.content ?? null,
    toolCalls: (m.toolCalls ?? []).map((c) => [c.id, c.function.name, c.function.arguments]),
  }));

const skip = hubMissing() ?? redisMissing() ?? false;

describe("CopilotKit runtimes in two processes, on two hub nodes sharing a Redis", { skip }, () => {
  let redis;
  let hubA;
  let hubB;
  let rtA;
  let rtB;
  let rtC; // a third runtime, on hub node A, killed in the last test
  before(async () => {
    redis = await startRedis();
    [hubA, hubB] = await Promise.all([
      startHub(["--node", "a"], { store: redis.url }),
      startHub(["--node", "b"], { store: redis.url }),
    ]);
    [rtA, rtB, rtC] = await Promise.all([startRuntime(hubA.http), startRuntime(hubB.http), startRuntime(hubA.http)]);
  });
  after(async () => {
    await Promise.all([rtA?.stop(), rtB?.stop(), rtC?.stop("SIGKILL")]);
    await Promise.all([hubA?.stop(), hubB?.stop()]);
    await redis?.stop();
  });

  test("a tab runs on runtime A and drops mid-run; a tab on runtime B connects and converges with the hub", async () => {
    const thread = threadId("ckc-drop");
    const one = tab(rtA, thread);
    const words = 24;
    const { controller } = runFrom(one, "run-drop", { words, step: 20 });
    await until("tab one has some of the reply", () => one.words() >= 3);
    controller.abort(); // the tab goes away (a reload); the run goes on in runtime A
    const dropped = one.words();
    assert.ok(!one.seen.some((e) => e.type === "RUN_FINISHED"), "tab one left before the end");
    const open = await hubB.thread(thread);
    assert.equal(open.run?.runId, "run-drop", "the run is open, seen from the other hub node");

    const two = tab(rtB, thread);
    await within(two.agent.connectAgent(), "tab two's connect through runtime B");
    const types = two.seen.map((e) => e.type);
    assert.equal(two.seen[0].type, "RUN_STARTED");
    assert.equal(two.seen[0].runId, "run-drop");
    assert.equal(types.at(-1), "RUN_FINISHED");
    assert.ok(types.includes("STATE_DELTA"), "live deltas after the catch-up");
    assert.ok(one.words() === dropped, "tab one saw nothing after it dropped");

    const [viewA, viewB] = await Promise.all([hubA.thread(thread), hubB.thread(thread)]);
    assert.equal(viewA.run, null);
    assert.deepEqual(viewB, viewA, "both hub nodes hold the same thread");
    assert.deepEqual(viewA.state, { doc: { title: "Streamed" }, words });
    const reply = viewA.messages.at(-1);
    assert.equal(reply.content, replyText(words));
    assert.equal(reply.toolCalls[0].function.arguments, '{"title":"Streamed"}');
    assert.deepEqual(viewA.messages[0], { id: "u-run-drop", role: "user", content: "Stream a reply" });
    assert.deepEqual(shape(two.agent.messages), shape(viewA.messages), "tab two holds the hub's messages");
    assert.deepEqual(two.agent.state, viewA.state, "and its state");
  });

  test("a stop from a tab on runtime B ends the run runtime A executes, within a second", async () => {
    const thread = threadId("ckc-stop");
    const one = tab(rtA, thread);
    const { result } = runFrom(one, "run-stop", { words: 20, step: 10, hangAfter: 3 });
    await until("tab one has the reply so far", () => one.words() === 3);
    await until("the hub holds it", async () => (await hubB.thread(thread)).messages.at(-1)?.content === replyText(3));

    const two = tab(rtB, thread);
    const asked = Date.now();
    two.agent.abortRun(); // CopilotKit's stop: POST {runtime B}/agent/default/stop/{thread}
    await within(result, "tab one's run after the stop", 3_000);
    const end = one.seen.at(-1);
    assert.equal(end.type, "RUN_ERROR");
    assert.equal(end.code, "cancelled");
    assert.ok(end.at - asked < 1_000, `tab one saw the end ${end.at - asked} ms after the stop`);
    assert.equal(one.words(), 3, "nothing after the stop");
    const view = await hubA.thread(thread);
    assert.equal(view.run, null);
    assert.equal(view.messages.at(-1).content, replyText(3), "the reply as far as it got");
  });

  test("a second run on the thread, through the other runtime, is refused: 'Thread already running'", async () => {
    const thread = threadId("ckc-twice");
    const one = tab(rtA, thread);
    const first = runFrom(one, "run-first", { words: 20, step: 10, hangAfter: 2 });
    await until("the first run is open", () => one.words() === 2);

    const two = tab(rtB, thread);
    two.agent.addMessage({ id: "u-second", role: "user", content: "Me too" });
    await within(two.agent.runAgent({ runId: "run-second", forwardedProps: { words: 3, step: 5 } }).catch((e) => e), "the refused run");
    const refusal = two.seen.find((e) => e.type === "RUN_ERROR");
    assert.ok(refusal, `tab two is told: ${JSON.stringify(two.seen)}`);
    assert.equal(refusal.message, "Thread already running");
    assert.equal(refusal.code, "run_in_progress");
    assert.equal(two.words(), 0, "tab two's run never streamed");
    const view = await hubB.thread(thread);
    assert.equal(view.run?.runId, "run-first", "the first run goes on");
    assert.ok(!view.messages.some((m) => m.id === "u-second"), "the refused turn is not in the thread");

    // The other way round as well: runtime A refuses while runtime B's run is open... after the
    // first run is stopped, from runtime B.
    two.agent.abortRun();
    await within(first.result, "the first run after its stop", 3_000);
    assert.equal(one.seen.at(-1).code, "cancelled");
    const three = tab(rtB, thread);
    three.agent.setMessages((await hubB.thread(thread)).messages);
    const second = runFrom(three, "run-third", { words: 20, step: 10, hangAfter: 2 });
    await until("runtime B's run is open", () => three.words() === 2);
    const four = tab(rtA, thread);
    four.agent.addMessage({ id: "u-fourth", role: "user", content: "And me" });
    await within(four.agent.runAgent({ runId: "run-fourth" }).catch((e) => e), "the refused run on A");
    assert.equal(four.seen.find((e) => e.type === "RUN_ERROR")?.message, "Thread already running");
    four.agent.abortRun();
    await within(second.result, "runtime B's run after its stop", 3_000);
    assert.equal((await hubA.thread(thread)).run, null);
  });

  test("a runtime process killed mid-run: the hub ends the run (agent_disconnected), a tab on the other runtime sees it", async () => {
    const thread = threadId("ckc-kill");
    const one = tab(rtC, thread);
    const { controller } = runFrom(one, "run-kill", { words: 20, step: 10, hangAfter: 4 });
    await until("tab one has the reply so far", () => one.words() === 4);
    // Tab one goes away first: a tab still reading from the killed process would have its stream
    // cut (CopilotKit's client reports a failed fetch), which is not what this test is about.
    controller.abort();

    const two = tab(rtB, thread);
    const connected = two.agent.connectAgent();
    await until("tab two follows the run", () => two.words() >= 1);
    assert.equal(two.seen[0].runId, "run-kill");
    await rtC.stop("SIGKILL");
    await within(connected, "tab two's connect after the kill", 5_000);
    const end = two.seen.at(-1);
    assert.equal(end.type, "RUN_ERROR");
    assert.equal(end.code, "agent_disconnected");
    const [viewA, viewB] = await Promise.all([hubA.thread(thread), hubB.thread(thread)]);
    assert.equal(viewA.run, null);
    assert.equal(viewB.run, null);
    assert.equal(viewB.messages.at(-1).content, replyText(4));

    // The thread is usable again, from the runtime that is left on the other node.
    const three = tab(rtB, thread);
    three.agent.setMessages(viewB.messages);
    await within(runFrom(three, "run-after", { words: 3, step: 5 }).result, "the next run");
    assert.equal(three.seen.at(-1).type, "RUN_FINISHED");
    assert.equal((await hubA.thread(thread)).messages.at(-1).content, replyText(3));
  });
});
