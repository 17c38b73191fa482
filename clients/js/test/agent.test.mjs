// HubAgent: the official @ag-ui/client AbstractAgent, fed by a real hub's thread, ends its runs
// holding the hub's state and messages.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import WebSocket from "ws";

import { HubAgent } from "../src/agent.js";
import { Agent, hubMissing, sleep, startHub, threadId } from "../test-support/hub.mjs";

const START = { type: "STATE_SNAPSHOT", snapshot: { doc: { title: "Draft", n: 0 } } };

function watcher(hub, thread, options = {}) {
  return new HubAgent({
    url: hub.ws,
    threadId: thread,
    WebSocket,
    hubOptions: { backoff: { initial: 20, max: 200 } },
    ...options,
  });
}

/** Run the official client's runAgent, recording the events its subscribers see. */
async function watch(agent, parameters = {}) {
  const seen = [];
  const warnings = [];
  const { warn, error } = console;
  console.warn = console.error = (...args) => warnings.push(args.join(" "));
  try {
    const result = await agent.runAgent(parameters, { onEvent: ({ event }) => seen.push(event.type) });
    return { result, seen, warnings };
  } finally {
    Object.assign(console, { warn, error });
  }
}

/** Wait until the agent's stream is connected and has its join snapshot. */
async function joined(agent) {
  const deadline = Date.now() + 10_000;
  while (!(agent.hub?.status === "open" && agent.hub.inSync)) {
    if (Date.now() > deadline) throw new Error("the agent never joined");
    await sleep(10);
  }
}

async function assertHolds(agent, hub) {
  const view = await hub.thread(agent.threadId);
  assert.deepEqual(agent.state, view.state);
  assert.deepEqual(agent.messages, view.messages);
}

describe("HubAgent on a real hub", { skip: hubMissing() ?? false }, () => {
  let hub;
  before(async () => {
    hub = await startHub();
  });
  after(async () => {
    await hub?.stop();
  });

  test("on an idle thread, runAgent wraps the join in a synthetic run and ends with the hub's copy", async () => {
    const thread = threadId("idle");
    const producer = await Agent.open(hub, thread);
    producer.send(
      START,
      { type: "RUN_STARTED", threadId: thread, runId: "r1" },
      { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "Done." },
      { type: "TEXT_MESSAGE_END", messageId: "m1" },
      { type: "RUN_FINISHED", threadId: thread, runId: "r1" },
    );
    assert.deepEqual(await producer.flush(), []);
    const agent = watcher(hub, thread);
    const { result, seen, warnings } = await watch(agent, { runId: "watch-1" });
    assert.deepEqual(seen, ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]);
    assert.deepEqual(warnings, []);
    await assertHolds(agent, hub);
    assert.deepEqual(
      result.newMessages.map((m) => m.id),
      ["m1"],
    );
    assert.equal(agent.isRunning, false);
    await producer.close();
  });

  test("joining mid-run, runAgent follows the run to its end (msgpack)", async () => {
    const thread = threadId("midrun");
    const producer = await Agent.open(hub, thread);
    producer.send(
      START,
      { type: "RUN_STARTED", threadId: thread, runId: "r1" },
      { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "Hel" },
      { type: "TOOL_CALL_START", toolCallId: "c1", toolCallName: "search", parentMessageId: "m1" },
      { type: "TOOL_CALL_ARGS", toolCallId: "c1", delta: '{"q":' },
    );
    await producer.flush();
    const agent = watcher(hub, thread, { encoding: "msgpack" });
    let states = 0;
    agent.subscribe({ onStateChanged: () => states++ });
    const running = watch(agent);
    await joined(agent); // mid-run: the message and the tool call are streaming
    producer.send(
      { type: "TOOL_CALL_ARGS", toolCallId: "c1", delta: '"x"}' },
      { type: "TOOL_CALL_END", toolCallId: "c1" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "lo" },
      { type: "TEXT_MESSAGE_END", messageId: "m1" },
      { type: "STATE_DELTA", delta: [{ op: "replace", path: "/doc/n", value: 7 }] },
      { type: "RUN_FINISHED", threadId: thread, runId: "r1" },
    );
    await producer.flush();
    const { seen, warnings } = await running;
    assert.deepEqual(warnings, []);
    assert.equal(seen[0], "RUN_STARTED");
    assert.equal(seen.at(-1), "RUN_FINISHED");
    assert.ok(seen.includes("TOOL_CALL_START") && seen.includes("TEXT_MESSAGE_END"));
    await assertHolds(agent, hub);
    assert.equal(agent.state.doc.n, 7);
    assert.equal(agent.messages[0].content, "Hello");
    assert.equal(agent.messages[0].toolCalls[0].function.arguments, '{"q":"x"}');
    assert.ok(states >= 2, "subscribers saw the state change");
    await producer.close();
  });

  test("until run-end, runAgent on an idle thread waits for the next run and ends with it", async () => {
    const thread = threadId("next");
    const producer = await Agent.open(hub, thread);
    producer.send(START);
    await producer.flush();
    const agent = watcher(hub, thread, { until: "run-end" });
    const running = watch(agent, { runId: "w" });
    await joined(agent);
    producer.send(
      { type: "STATE_DELTA", delta: [{ op: "replace", path: "/doc/n", value: 1 }] }, // between runs
      { type: "RUN_STARTED", threadId: thread, runId: "r2" },
      { type: "STATE_DELTA", delta: [{ op: "replace", path: "/doc/title", value: "Final" }] },
      { type: "RUN_FINISHED", threadId: thread, runId: "r2" },
    );
    await producer.flush();
    const { seen, warnings } = await running;
    assert.deepEqual(warnings, []);
    assert.deepEqual(seen, [
      "RUN_STARTED", // synthetic: w
      "STATE_SNAPSHOT",
      "MESSAGES_SNAPSHOT",
      "STATE_DELTA",
      "RUN_FINISHED", // synthetic, closed before the real run
      "RUN_STARTED", // r2
      "STATE_DELTA",
      "RUN_FINISHED",
    ]);
    await assertHolds(agent, hub);
    assert.deepEqual(agent.state, { doc: { title: "Final", n: 1 } });
    await producer.close();
  });

  test("a reconnect the hub cannot replay restarts the watched run cleanly", async () => {
    const small = await startHub(["--retention", "3"]);
    try {
      const thread = threadId("rejoin");
      const producer = await Agent.open(small, thread);
      producer.send(
        START,
        { type: "RUN_STARTED", threadId: thread, runId: "r1" },
        { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
        { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "Hel" },
      );
      await producer.flush();
      const agent = watcher(small, thread, { until: "abort" });
      const running = watch(agent);
      await joined(agent);
      agent.hub.disconnect();
      producer.send(
        { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "lo" },
        { type: "TEXT_MESSAGE_END", messageId: "m1" },
        { type: "TEXT_MESSAGE_START", messageId: "m2", role: "assistant" },
        { type: "TEXT_MESSAGE_CONTENT", messageId: "m2", delta: "Wor" },
      ); // the same run still open, m1 ended meanwhile: the watched stream must not keep it open
      await producer.flush();
      await agent.hub.waitFor((c) => c.reconnects === 1 && c.inSync);
      assert.equal(agent.hub.welcome.resumed, false, "the log no longer holds what it missed");
      producer.send(
        { type: "TEXT_MESSAGE_CONTENT", messageId: "m2", delta: "ld" },
        { type: "TEXT_MESSAGE_END", messageId: "m2" },
        { type: "RUN_FINISHED", threadId: thread, runId: "r1" },
      );
      await producer.flush();
      await agent.hub.whenSynced((await small.thread(thread)).seq);
      await sleep(50);
      agent.abortRun();
      const { warnings } = await running;
      assert.deepEqual(warnings, []);
      await assertHolds(agent, small);
      assert.deepEqual(
        agent.messages.map((m) => m.content),
        ["Hello", "World"],
      );
      await producer.close();
    } finally {
      await small.stop();
    }
  });

  test("until abort, connectAgent keeps watching across runs until abortRun()", async () => {
    const thread = threadId("abort");
    const producer = await Agent.open(hub, thread);
    producer.send(START);
    await producer.flush();
    const agent = watcher(hub, thread, { until: "abort" });
    const running = agent.connectAgent({ runId: "w" });
    await joined(agent);
    for (const id of ["r1", "r2"]) {
      producer.send(
        { type: "RUN_STARTED", threadId: thread, runId: id },
        { type: "STATE_DELTA", delta: [{ op: "replace", path: "/doc/title", value: id }] },
        { type: "RUN_FINISHED", threadId: thread, runId: id },
      );
    }
    await producer.flush();
    const view = await hub.thread(thread);
    await agent.hub.whenSynced(view.seq);
    await sleep(50); // the official client applies events asynchronously
    agent.abortRun();
    await running;
    await assertHolds(agent, hub);
    assert.equal(agent.state.doc.title, "r2");
    await producer.close();
  });
});
