// HubClient.run() and cancel() against a real hub process calling real AG-UI HTTP agents.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import WebSocket from "ws";

import { HubClient, HubRunError } from "../src/agui-hub.js";
import { AgentServer } from "../test-support/agents.mjs";
import { hubMissing, startHub, threadId } from "../test-support/hub.mjs";

const TIMEOUT = 10_000;
const user = (id, content) => ({ id, role: "user", content });

const clients = [];
/** Every event each client applied, in order (a run's end is looked up here). */
const logs = new Map();
function open(hub, thread, options = {}) {
  const client = new HubClient({ url: hub.ws, thread, WebSocket, backoff: { initial: 20, max: 200 }, ...options });
  const log = [];
  client.on("event", (event) => log.push(event));
  logs.set(client, log);
  clients.push(client);
  return client;
}

/** The RUN_FINISHED or RUN_ERROR ending the run `runId`, once `client` has received it. */
async function runEnd(client, runId) {
  const log = logs.get(client);
  const deadline = Date.now() + TIMEOUT;
  for (;;) {
    const start = log.findIndex((e) => e.type === "RUN_STARTED" && e.runId === runId);
    const ends = (e) => e.type === "RUN_FINISHED" || e.type === "RUN_ERROR";
    const end = start < 0 ? undefined : log.slice(start + 1).find(ends);
    if (end !== undefined) return end;
    if (Date.now() > deadline) throw new Error(`run ${runId} did not end at ${client.thread}`);
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

describe("HubClient.run() and cancel() on a real hub", { skip: hubMissing() ?? false }, () => {
  let hub;
  let agents;
  before(async () => {
    agents = await new AgentServer().start();
    hub = await startHub(["--agent", `echo=${agents.url("echo")}`, "--agent", `hold=${agents.url("hold")}`]);
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await hub?.stop();
    await agents?.close();
  });

  test("a run's reply streams into every client of the thread, and its state persists", async () => {
    const thread = threadId("run");
    const alice = open(hub, thread);
    const bob = open(hub, thread);
    await Promise.all([alice.whenSynced(), bob.whenSynced()]);
    const streamed = [];
    bob.on("event", (e) => e.type === "TEXT_MESSAGE_CONTENT" && streamed.push(e.delta));
    const started = await alice.run("echo", [user("u1", "hello, agent")]);
    assert.deepEqual(Object.keys(started).sort(), ["runId", "threadId"]);
    assert.equal(started.threadId, thread);
    const [endA, endB] = await Promise.all([runEnd(alice, started.runId), runEnd(bob, started.runId)]);
    assert.equal(endA.type, "RUN_FINISHED");
    assert.equal(endB.type, "RUN_FINISHED");
    assert.deepEqual(streamed, ["You said ", "“hello, agent”"]);
    // The agent was given the thread's messages, the user's included, and its state (empty).
    const input = await agents.got(started.runId);
    assert.deepEqual(input.messages, [user("u1", "hello, agent")]);
    assert.deepEqual(input.state, {});
    for (const client of [alice, bob]) {
      assert.deepEqual(
        client.messages.map((m) => [m.role, m.content]),
        [
          ["user", "hello, agent"],
          ["assistant", "You said “hello, agent”"],
        ],
      );
      assert.deepEqual(client.state, { runs: 1 });
    }
    // A second run, from the other client: the agent gets the state the first one left.
    const second = await bob.run("echo", [user("u2", "again")], { forwardedProps: { from: "bob" } });
    await runEnd(alice, second.runId);
    const again = await agents.got(second.runId);
    assert.deepEqual(again.state, { runs: 1 });
    assert.deepEqual(again.forwardedProps, { from: "bob" });
    assert.equal(again.parentRunId, started.runId);
    assert.deepEqual(alice.state, { runs: 2 });
    assert.equal(alice.messages.at(-1).content, "You said “again”");
    const view = await hub.thread(thread);
    await alice.whenSynced(view.seq, { timeout: TIMEOUT });
    assert.deepEqual([alice.state, alice.messages], [view.state, view.messages]);
  });

  test("the hub's refusals reject with its code: unknown_agent, run_in_progress, bad_request", async () => {
    const thread = threadId("refused");
    const client = open(hub, thread);
    await client.whenSynced();
    const unknown = await rejection(client.run("nobody", [user("u1", "hi")]));
    assert.ok(unknown instanceof HubRunError);
    assert.equal(unknown.code, "unknown_agent");
    const held = await client.run("hold", []);
    const busy = await rejection(client.run("echo", [user("u2", "hi")]));
    assert.equal(busy.code, "run_in_progress");
    const bad = await rejection(client.run("echo", [{ id: "u3", role: "nobody", content: "?" }]));
    assert.equal(bad.code, "bad_request");
    assert.throws(() => client.run(""), TypeError);
    assert.throws(() => client.run("echo", "not a list"), TypeError);
    await client.cancel(held.runId);
  });

  test("cancel() ends the run for everyone and closes the agent's request; an unknown run is refused", async () => {
    const thread = threadId("cancel");
    const client = open(hub, thread);
    const other = open(hub, thread);
    await Promise.all([client.whenSynced(), other.whenSynced()]);
    const { runId } = await client.run("hold", [user("u1", "take your time")]);
    await agents.got(runId); // a cancel before the request reaches the agent closes nothing there
    const seenByOther = runEnd(other, runId);
    const ended = await client.cancel(runId);
    assert.deepEqual(ended, { runId, type: "RUN_ERROR", code: "cancelled" });
    assert.equal((await seenByOther).code, "cancelled");
    const deadline = Date.now() + TIMEOUT;
    while (!agents.closed.includes(runId)) {
      assert.ok(Date.now() < deadline, "the agent's request was closed");
      await new Promise((r) => setTimeout(r, 20));
    }
    const unknown = await rejection(client.cancel(runId));
    assert.equal(unknown.code, "unknown_run");
    // The thread is free again.
    const next = await client.run("echo", [user("u2", "done?")]);
    assert.equal((await runEnd(client, next.runId)).type, "RUN_FINISHED");
  });

  test("runs and edits sent together are each answered, in turn", async () => {
    const thread = threadId("turns");
    const client = open(hub, thread);
    await client.whenSynced();
    await client.replaceState({ doc: "v0" });
    const edit = client.publish([{ op: "replace", path: "/doc", value: "v1" }], { test: true });
    const run = client.run("echo", [user("u1", "edit and run")]);
    const conflicting = client.publish([{ op: "test", path: "/doc", value: "v0" }]); // v1 by then
    const refused = client.run("nobody", []);
    assert.equal((await edit).status, "acked");
    const { runId } = await run;
    assert.equal((await conflicting).status, "conflict");
    assert.equal((await rejection(refused)).code, "unknown_agent");
    await runEnd(client, runId);
    const view = await hub.thread(thread);
    await client.whenSynced(view.seq, { timeout: TIMEOUT });
    assert.deepEqual(client.state, view.state);
  });

  test("a run asked for before the connection opens is sent once it does; close() rejects what is queued", async () => {
    const thread = threadId("queued");
    const client = open(hub, thread);
    const started = client.run("echo", [user("u1", "early")]); // the socket is not open yet
    const { runId } = await started;
    assert.equal((await runEnd(client, runId)).type, "RUN_FINISHED");
    const closing = open(hub, threadId("closing"), { autoConnect: false });
    const never = closing.run("echo", [user("u1", "never sent")]);
    await closing.close();
    assert.equal((await rejection(never)).code, "closed");
  });
});
