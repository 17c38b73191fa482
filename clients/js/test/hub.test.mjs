// HubClient against a real hub process: it converges, resumes, repairs itself, and publishes.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import WebSocket from "ws";

import { HubClient } from "../src/agui-hub.js";
import { Agent, hubMissing, startHub, threadId } from "../test-support/hub.mjs";

const TIMEOUT = 10_000;

const run = (thread, id) => [
  { type: "RUN_STARTED", threadId: thread, runId: id },
  { type: "MESSAGES_SNAPSHOT", messages: [{ id: `u-${id}`, role: "user", content: "write it" }] },
  { type: "STATE_DELTA", delta: [{ op: "add", path: "/doc/sections/-", value: `Section ${id}` }] },
  { type: "TEXT_MESSAGE_START", messageId: `m-${id}`, role: "assistant" },
  { type: "TEXT_MESSAGE_CONTENT", messageId: `m-${id}`, delta: "Writing " },
  { type: "TOOL_CALL_START", toolCallId: `c-${id}`, toolCallName: "outline", parentMessageId: `m-${id}` },
  { type: "TOOL_CALL_ARGS", toolCallId: `c-${id}`, delta: '{"depth":2}' },
  { type: "TOOL_CALL_END", toolCallId: `c-${id}` },
  { type: "TEXT_MESSAGE_CONTENT", messageId: `m-${id}`, delta: "it." },
  { type: "TEXT_MESSAGE_END", messageId: `m-${id}` },
  { type: "TOOL_CALL_RESULT", messageId: `r-${id}`, toolCallId: `c-${id}`, content: "ok" },
  { type: "STATE_DELTA", delta: [{ op: "replace", path: "/doc/words", value: 42 }] },
  { type: "RUN_FINISHED", threadId: thread, runId: id },
];
const START = { type: "STATE_SNAPSHOT", snapshot: { doc: { title: "Draft", sections: [], words: 0 } } };

/** The client holds exactly the hub's view of the thread: position, state, messages. */
async function assertConverged(client, hub) {
  const view = await hub.thread(client.thread);
  await client.whenSynced(view.seq, { timeout: TIMEOUT });
  assert.deepEqual([client.epoch, client.seq], [view.epoch, view.seq]);
  assert.deepEqual(client.state, view.state);
  assert.deepEqual(client.messages, view.messages);
}

const clients = [];
function open(hub, thread, options = {}) {
  const client = new HubClient({
    url: hub.ws,
    thread,
    WebSocket,
    backoff: { initial: 20, max: 200 },
    ...options,
  });
  clients.push(client);
  return client;
}

describe("a HubClient on a real hub", { skip: hubMissing() ?? false }, () => {
  let hub;
  before(async () => {
    hub = await startHub();
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await hub?.stop();
  });

  test("JSON and msgpack clients converge to the hub's state and messages", async () => {
    const thread = threadId("converge");
    const agent = await Agent.open(hub, thread);
    agent.send(START, ...run(thread, "r1"));
    assert.deepEqual(await agent.flush(), []);
    const json = open(hub, thread);
    const binary = open(hub, thread, { encoding: "msgpack" });
    await assertConverged(json, hub);
    await assertConverged(binary, hub);
    assert.equal(binary.socket.protocol, "agui-hub.msgpack");
    agent.send(...run(thread, "r2")); // live, this time
    assert.deepEqual(await agent.flush(), []);
    await assertConverged(json, hub);
    await assertConverged(binary, hub);
    assert.deepEqual(json.state.doc.sections, ["Section r1", "Section r2"]);
    assert.equal(json.messages.find((m) => m.id === "m-r2").content, "Writing it.");
    for (const client of [json, binary]) {
      assert.deepEqual(client.snapshots, { join: 1 });
      assert.deepEqual(client.resyncs, {});
    }
    await agent.close();
  });

  test("after its socket is killed it resumes with since and gets a replay, not a snapshot", async () => {
    const thread = threadId("resume");
    const agent = await Agent.open(hub, thread);
    agent.send(START);
    await agent.flush();
    const client = open(hub, thread);
    await assertConverged(client, hub);
    const joins = await hub.metric("agui_hub_resyncs_total", { cause: "join" });
    const seen = [];
    client.on("status", (status, detail) =>
      seen.push([status, detail.resumed ?? detail.willReconnect ?? null]),
    );
    client.disconnect(); // no close handshake: as a network failure
    agent.send(...run(thread, "r1")); // while it is away
    await agent.flush();
    await client.waitFor((c) => c.reconnects === 1, { timeout: TIMEOUT });
    await assertConverged(client, hub);
    assert.equal(client.welcome.resumed, true);
    assert.deepEqual(client.snapshots, { join: 1 });
    assert.deepEqual(client.closeCodes, [1006]);
    assert.deepEqual(seen, [
      ["closed", true],
      ["connecting", null],
      ["open", true],
    ]);
    assert.equal(await hub.metric("agui_hub_resyncs_total", { cause: "join" }), joins, "no new join");
    await agent.close();
  });

  test("a broken copy and a lost event are each repaired with one snapshot, for that client only", async () => {
    const thread = threadId("repair");
    const agent = await Agent.open(hub, thread);
    agent.send(START);
    await agent.flush();
    const broken = open(hub, thread);
    const lossy = open(hub, thread);
    const bystander = open(hub, thread);
    await Promise.all([broken, lossy, bystander].map((c) => assertConverged(c, hub)));
    broken.mirror.corrupt("/doc", "not an object any more");
    lossy.mirror.dropNext(1);
    agent.send(...run(thread, "r1"));
    await agent.flush();
    for (const client of [broken, lossy, bystander]) await assertConverged(client, hub);
    assert.deepEqual(broken.resyncs, { patch_failed: 1 });
    assert.deepEqual(broken.snapshots, { join: 1, patch_failed: 1 });
    assert.deepEqual(lossy.resyncs, { gap: 1 });
    assert.deepEqual(lossy.snapshots, { join: 1, gap: 1 });
    assert.deepEqual(bystander.snapshots, { join: 1 }, "nobody else noticed");
    await agent.close();
  });

  test("optimistic edits are acked, stale ones conflict and are repaired", async () => {
    const thread = threadId("edits");
    const agent = await Agent.open(hub, thread);
    agent.send(START);
    await agent.flush();
    const writer = open(hub, thread);
    const other = open(hub, thread, { encoding: "msgpack" });
    await assertConverged(writer, hub);
    await assertConverged(other, hub);
    const conflicts = [];
    writer.on("conflict", (outcome) => conflicts.push(outcome));

    const rename = writer.publish([{ op: "replace", path: "/doc/title", value: "Final" }], { test: true });
    assert.equal(writer.optimisticState.doc.title, "Final");
    assert.equal(writer.state.doc.title, "Draft");
    const acked = await rename;
    assert.deepEqual([acked.ok, acked.status], [true, "acked"]);
    await assertConverged(other, hub);
    assert.equal(other.state.doc.title, "Final");
    assert.equal(other.state.doc.title, writer.state.doc.title);

    // The other client edits the title; the writer's next edit was made against the old one.
    assert.equal(
      (await other.publish([{ op: "replace", path: "/doc/title", value: "Theirs" }], { test: true })).status,
      "acked",
    );
    const stale = await writer.publish([{ op: "replace", path: "/doc/title", value: "Mine" }], {
      test: { "/doc/title": "Final" },
    });
    assert.deepEqual([stale.ok, stale.status, stale.code], [false, "conflict", "conflict"]);
    assert.equal(conflicts.length, 1);
    // The error reply settles the edit; the repair snapshot follows it (the live delta may
    // have converged the copy already, so wait for the snapshot itself).
    await writer.waitFor((c) => c.snapshots.conflict === 1, { timeout: TIMEOUT });
    await assertConverged(writer, hub);
    assert.equal(writer.state.doc.title, "Theirs");

    // A whole new state, made against a position that has moved on, conflicts too.
    const base = writer.seq;
    agent.send({ type: "STATE_DELTA", delta: [{ op: "replace", path: "/doc/words", value: 1 }] });
    await agent.flush();
    assert.equal((await writer.replaceState({ reset: true }, { base })).status, "conflict");
    await assertConverged(writer, hub);
    const fresh = await writer.replaceState({ reset: true });
    assert.equal(fresh.status, "acked");
    await assertConverged(writer, hub);
    await assertConverged(other, hub);
    assert.deepEqual(other.state, { reset: true });
    assert.equal(await hub.metric("agui_hub_resyncs_total", { cause: "conflict" }), 2);
    await agent.close();
  });
});

describe("a slow HubClient on a real hub", { skip: hubMissing() ?? false }, () => {
  let hub;
  before(async () => {
    hub = await startHub(["--consumer-buffer", "200000", "--slow-timeout", "30"]);
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await hub?.stop();
  });

  test("is conflated to one snapshot instead of disconnected, and converges", async () => {
    const thread = threadId("slow");
    const agent = await Agent.open(hub, thread);
    agent.send({ type: "STATE_SNAPSHOT", snapshot: {} });
    await agent.flush();
    const slow = open(hub, thread);
    await assertConverged(slow, hub);
    slow.socket._socket.pause(); // stop reading: the hub's buffer for it fills up
    const blob = "x".repeat(50_000);
    for (let i = 0; i < 150; i++) {
      agent.send({ type: "STATE_DELTA", delta: [{ op: "add", path: `/k${i % 20}`, value: blob + i }] });
    }
    await agent.flush(30_000);
    assert.ok((await hub.metric("agui_hub_buffer_drops_total")) >= 1, "the hub dropped the backlog");
    let applied = 0;
    slow.on("event", () => applied++);
    slow.socket._socket.resume();
    await assertConverged(slow, hub);
    assert.ok(slow.snapshots.unrequested >= 1, JSON.stringify(slow.snapshots));
    assert.ok(applied < 150, `the backlog was conflated, not delivered (${applied} events)`);
    assert.deepEqual(slow.closeCodes, [], "still connected");
    assert.ok((await hub.metric("agui_hub_resyncs_total", { cause: "slow_consumer" })) >= 1);
    await agent.close();
  });
});
