// HubClient with `transport: "sse"` against real hub processes: the thread's event stream
// (EventSource, test-support/event-source.mjs for Node), resumes with Last-Event-ID and with
// ?since=&epoch=, repairs by rejoining, and runs over HTTP POST/DELETE.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import WebSocket from "ws";

import { HubClient, HubRunError } from "../src/agui-hub.js";
import { AgentServer } from "../test-support/agents.mjs";
import { EventSource } from "../test-support/event-source.mjs";
import { Agent, HUB_BIN, hubMissing, sleep, startHub, threadId } from "../test-support/hub.mjs";

const TIMEOUT = 10_000;
const START = { type: "STATE_SNAPSHOT", snapshot: { doc: { title: "Draft", sections: [] } } };
const section = (name) => ({ type: "STATE_DELTA", delta: [{ op: "add", path: "/doc/sections/-", value: name }] });
const user = (id, content) => ({ id, role: "user", content });
const text = (id, ...parts) => [
  { type: "TEXT_MESSAGE_START", messageId: id, role: "assistant" },
  ...parts.map((delta) => ({ type: "TEXT_MESSAGE_CONTENT", messageId: id, delta })),
  { type: "TEXT_MESSAGE_END", messageId: id },
];

/** The client holds exactly the hub's view of the thread: position, state, messages. */
async function assertConverged(client, hub) {
  const view = await hub.thread(client.thread);
  await client.whenSynced(view.seq, { timeout: TIMEOUT });
  assert.deepEqual([client.epoch, client.seq], [view.epoch, view.seq]);
  assert.deepEqual(client.state, view.state);
  assert.deepEqual(client.messages, view.messages);
  return view;
}

const clients = [];
function open(hub, thread, options = {}) {
  const client = new HubClient({
    url: hub.ws,
    thread,
    transport: "sse",
    EventSource,
    backoff: { initial: 20, max: 200 },
    ...options,
  });
  clients.push(client);
  return client;
}

/** The headers of every request the client's current EventSource made. */
const requests = (client) => client.socket.source.requests;

describe("HubClient over SSE on a real hub", { skip: hubMissing() ?? false }, () => {
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

  test("it joins over the event stream and follows live events to the hub's state", async () => {
    const thread = threadId("sse-join");
    const agent = await Agent.open(hub, thread);
    agent.send(START, section("one"), ...text("m1", "Hello", ", world"));
    assert.deepEqual(await agent.flush(), []);
    const client = open(hub, thread);
    const joined = await assertConverged(client, hub);
    assert.equal(client.welcome.resumed, false);
    // The join's repair frames have no id; the id-only event after them gives its position.
    assert.equal(client.socket.lastEventId, `${joined.epoch}:${joined.seq}`);
    assert.match(client.socket.url, new RegExp(`^http://127\\.0\\.0\\.1:${hub.port}/v1/threads/${thread}/events$`));
    agent.send(section("two"), ...text("m2", "live"));
    await agent.flush();
    const view = await assertConverged(client, hub);
    assert.deepEqual(view.state.doc.sections, ["one", "two"]);
    assert.deepEqual(client.snapshots, { join: 1 });
    assert.deepEqual(client.resyncs, {});
    // The source's last event id is the position of the last live event.
    assert.equal(client.socket.lastEventId, `${view.epoch}:${view.seq}`);
    await agent.close();
  });

  test("a cut stream is resumed by the EventSource itself with Last-Event-ID: a replay, no snapshot", async () => {
    const thread = threadId("sse-cut");
    const agent = await Agent.open(hub, thread);
    agent.send(START, section("before"));
    await agent.flush();
    const client = open(hub, thread);
    const before = await assertConverged(client, hub);
    const joins = await hub.metric("agui_hub_resyncs_total", { cause: "join" });
    const applied = [];
    client.on("event", (e) => applied.push(e.metadata?.hub));
    const source = client.socket.source;
    source.cut(); // as the network would; the source reconnects after the hub's retry (1 s)
    await client.waitFor((c) => c.status !== "open", { timeout: TIMEOUT });
    agent.send(section("while away"), ...text("m1", "missed"));
    await agent.flush();
    await client.waitFor((c) => c.reconnects === 1, { timeout: TIMEOUT });
    const after = await assertConverged(client, hub);
    assert.equal(client.socket.source, source, "the same EventSource reconnected");
    assert.equal(requests(client).length, 2);
    assert.equal(requests(client)[0]["Last-Event-ID"], undefined);
    assert.equal(requests(client)[1]["Last-Event-ID"], `${before.epoch}:${before.seq}`);
    assert.equal(client.welcome.resumed, true);
    assert.deepEqual(client.snapshots, { join: 1 });
    // Every missed event was replayed one by one, live (no repair frames).
    const seqs = applied.map((h) => h.seq);
    assert.deepEqual(seqs, Array.from({ length: after.seq - before.seq }, (_, i) => before.seq + 1 + i));
    assert.ok(applied.every((h) => !h.sync));
    assert.equal(await hub.metric("agui_hub_resyncs_total", { cause: "join" }), joins, "no new join");
    await agent.close();
  });

  test("a stream it drops itself is reopened with ?since=&epoch= from its copy and resumed", async () => {
    const thread = threadId("sse-since");
    const agent = await Agent.open(hub, thread);
    agent.send(START, section("a"));
    await agent.flush();
    const client = open(hub, thread);
    const before = await assertConverged(client, hub);
    const first = client.socket.source;
    client.disconnect();
    agent.send(section("b"), section("c"));
    await agent.flush();
    await client.waitFor((c) => c.reconnects === 1, { timeout: TIMEOUT });
    await assertConverged(client, hub);
    assert.notEqual(client.socket.source, first, "a new EventSource");
    const url = new URL(client.socket.url);
    assert.deepEqual([url.searchParams.get("since"), url.searchParams.get("epoch")], [String(before.seq), before.epoch]);
    assert.equal(client.welcome.resumed, true);
    assert.deepEqual(client.snapshots, { join: 1 });
    assert.deepEqual(client.closeCodes, [1006]);
    await agent.close();
  });

  test("a broken copy and a lost event each rejoin from scratch, for that client only", async () => {
    const thread = threadId("sse-repair");
    const agent = await Agent.open(hub, thread);
    agent.send(START);
    await agent.flush();
    const broken = open(hub, thread);
    const lossy = open(hub, thread);
    const fine = open(hub, thread);
    await Promise.all([broken, lossy, fine].map((c) => assertConverged(c, hub)));
    broken.mirror.corrupt("/doc/sections", "not a list"); // the next add fails here
    lossy.mirror.dropNext(1); // the next event never arrives: the one after is a gap
    const resyncs = [];
    for (const c of [broken, lossy]) c.on("resync", ({ reason }) => resyncs.push(reason));
    agent.send(section("x"), section("y"));
    await agent.flush();
    for (const c of [broken, lossy, fine]) await assertConverged(c, hub);
    assert.deepEqual(resyncs.sort(), ["gap", "patch_failed"]);
    assert.deepEqual(broken.resyncs, { patch_failed: 1 });
    assert.deepEqual(broken.snapshots, { join: 1, patch_failed: 1 });
    assert.deepEqual(lossy.resyncs, { gap: 1 });
    assert.deepEqual(lossy.snapshots, { join: 1, gap: 1 });
    assert.deepEqual(fine.snapshots, { join: 1 });
    for (const c of [broken, lossy]) {
      // The repair was a new stream: no Last-Event-ID, no since.
      assert.deepEqual(requests(c).map((h) => h["Last-Event-ID"]), [undefined]);
      assert.equal(new URL(c.socket.url).search, "");
      assert.equal(c.welcome.resumed, false);
      assert.deepEqual(c.closeCodes, [4000]);
    }
    assert.equal(fine.reconnects, 0);
    await agent.close();
  });

  test("run() is a POST and cancel() a DELETE; the reply streams in; the hub's refusals keep their codes", async () => {
    const thread = threadId("sse-run");
    const client = open(hub, thread);
    const other = open(hub, thread);
    await Promise.all([client.whenSynced(), other.whenSynced()]);
    const outcomes = [];
    client.on("run", (o) => outcomes.push(["run", o.ok]));
    client.on("cancel", (o) => outcomes.push(["cancel", o.ok]));
    const started = await client.run("echo", [user("u1", "over http")]);
    assert.deepEqual(Object.keys(started).sort(), ["runId", "threadId"]);
    assert.equal(started.threadId, thread);
    await other.waitFor((c) => c.messages.some((m) => m.id === `reply-${started.runId}`) && c.mirror.runId === null, {
      timeout: TIMEOUT,
    });
    const view = await assertConverged(client, hub);
    assert.equal(view.messages.at(-1).content, "You said “over http”");
    await assertConverged(other, hub);

    const unknown = await client.run("nobody").catch((e) => e);
    assert.ok(unknown instanceof HubRunError);
    assert.equal(unknown.code, "unknown_agent");

    const held = await client.run("hold", [user("u2", "wait")]);
    await agents.got(held.runId);
    const busy = await client.run("echo").catch((e) => e);
    assert.equal(busy.code, "run_in_progress");
    const ended = await client.cancel(held.runId);
    assert.deepEqual(ended, { runId: held.runId, type: "RUN_ERROR", code: "cancelled" });
    assert.equal(client.mirror.runId, null, "the run's end is in the copy when cancel() resolves");
    const again = await client.cancel(held.runId).catch((e) => e);
    assert.equal(again.code, "unknown_run");
    await assertConverged(client, hub);
    assert.deepEqual(outcomes, [
      ["run", true],
      ["run", false],
      ["run", true],
      ["run", false],
      ["cancel", true],
      ["cancel", false],
    ]);
    assert.throws(() => client.run(""), TypeError);
  });

  for (const transport of ["sse", "websocket"]) {
    test(`with a path (${transport}) it holds that subtree, through a reconnect`, async () => {
      const thread = threadId(`sse-path-${transport}`);
      const agent = await Agent.open(hub, thread);
      const outside = { type: "STATE_DELTA", delta: [{ op: "add", path: "/other", value: 1 }] };
      agent.send(START, section("one"), outside);
      await agent.flush();
      const client = open(hub, thread, { path: "/doc", transport, WebSocket });
      let view = await hub.thread(thread);
      await client.whenSynced(view.seq, { timeout: TIMEOUT });
      assert.deepEqual(client.state, view.state.doc);
      assert.match(client.socket.url, /[?&]path=%2Fdoc(&|$)/);
      client.disconnect();
      agent.send(section("two"), outside);
      await agent.flush();
      view = await hub.thread(thread);
      await client.whenSynced(view.seq, { timeout: TIMEOUT });
      assert.deepEqual(client.state, { title: "Draft", sections: ["one", "two"] });
      assert.deepEqual(client.state, view.state.doc);
      assert.deepEqual(client.resyncs, {});
      await client.close();
      await agent.close();
    });
  }

  for (const transport of ["sse", "websocket"]) {
    test(`with several paths (${transport}) it holds their projection, through a reconnect`, async () => {
      const thread = threadId(`sse-paths-${transport}`);
      const agent = await Agent.open(hub, thread);
      const elsewhere = { type: "STATE_DELTA", delta: [{ op: "add", path: "/noise", value: 0 }] };
      agent.send(START, section("one"), elsewhere);
      await agent.flush();
      const projection = (state) => {
        const held = {};
        if (state.doc?.title !== undefined) held.doc = { title: state.doc.title };
        if (state.other !== undefined) held.other = state.other;
        return held;
      };
      const client = open(hub, thread, { path: ["/doc/title", "/other"], transport, WebSocket });
      let view = await hub.thread(thread);
      await client.whenSynced(view.seq, { timeout: TIMEOUT });
      assert.deepEqual(client.state, { doc: { title: "Draft" } });
      assert.match(client.socket.url, /[?&]path=%2Fdoc%2Ftitle&path=%2Fother(&|$)/);
      // /other appears (the hub writes it at its place), the title changes, /doc goes away
      // (and with it the ancestor the title held), all around writes it leaves out.
      agent.send(
        { type: "STATE_DELTA", delta: [{ op: "add", path: "/other", value: { n: 1 } }] },
        elsewhere,
        { type: "STATE_DELTA", delta: [{ op: "replace", path: "/doc/title", value: "Final" }] },
      );
      await agent.flush();
      view = await hub.thread(thread);
      await client.whenSynced(view.seq, { timeout: TIMEOUT });
      assert.deepEqual(client.state, { doc: { title: "Final" }, other: { n: 1 } });
      client.disconnect();
      agent.send({ type: "STATE_DELTA", delta: [{ op: "remove", path: "/doc" }] }, elsewhere);
      await agent.flush();
      view = await hub.thread(thread);
      await client.whenSynced(view.seq, { timeout: TIMEOUT });
      assert.deepEqual(client.state, projection(view.state));
      assert.deepEqual(client.state, { other: { n: 1 } });
      agent.send({ type: "STATE_DELTA", delta: [{ op: "add", path: "/doc", value: { title: "Back" } }] });
      await agent.flush();
      view = await hub.thread(thread);
      await client.whenSynced(view.seq, { timeout: TIMEOUT });
      assert.deepEqual(client.state, { other: { n: 1 }, doc: { title: "Back" } });
      assert.deepEqual(client.resyncs, {});
      assert.throws(() => open(hub, thread, { path: [] }), TypeError);
      assert.throws(() => open(hub, thread, { path: ["/a", 1] }), TypeError);
      await client.close();
      await agent.close();
    });
  }

  test("edits need the WebSocket; a closed client's run is refused with `closed`", async () => {
    const client = open(hub, threadId("sse-edit"));
    await client.whenSynced();
    assert.throws(() => client.publish([{ op: "add", path: "/x", value: 1 }]), /WebSocket transport/);
    assert.throws(() => client.replaceState({}), /WebSocket transport/);
    assert.throws(() => open(hub, "t", { encoding: "msgpack" }), /JSON only/);
    assert.throws(() => open(hub, "t", { transport: "carrier-pigeon" }), /transport must be/);
    assert.throws(() => open(hub, "t", { EventSource: undefined }), /no EventSource/);
    await client.close();
    assert.equal(client.socket, null);
    assert.equal((await client.run("echo").catch((e) => e)).code, "closed");
  });
});

describe("HubClient over SSE across a hub restart (SQLite store)", { skip: hubMissing() ?? false }, () => {
  const dir = mkdtempSync(join(tmpdir(), "agui-sse-"));
  const store = `sqlite:///${join(dir, "hub.db")}`;
  let hub;
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await hub?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("the EventSource resumes from the restarted hub's log with Last-Event-ID", async () => {
    hub = await startHub(["--store", store]);
    const port = hub.port;
    const thread = threadId("sse-restart");
    let agent = await Agent.open(hub, thread);
    agent.send(START, section("first life"));
    await agent.flush();
    await agent.close();
    const client = open(hub, thread, { openTimeout: 20_000 });
    const before = await assertConverged(client, hub);
    await hub.stop();
    await client.waitFor((c) => c.status !== "open", { timeout: TIMEOUT });
    hub = await startHub(["--store", store, "--port", String(port)]);
    agent = await Agent.open(hub, thread);
    agent.send(section("second life"), ...text("m1", "still here"));
    assert.deepEqual(await agent.flush(), []);
    await client.waitFor((c) => c.reconnects === 1, { timeout: 15_000 });
    const after = await assertConverged(client, hub);
    assert.equal(after.epoch, before.epoch, "the store kept the thread's history");
    assert.deepEqual(after.state.doc.sections, ["first life", "second life"]);
    assert.equal(client.welcome.resumed, true);
    assert.deepEqual(client.snapshots, { join: 1 });
    const ids = requests(client).map((h) => h["Last-Event-ID"]);
    assert.equal(ids[0], undefined);
    assert.ok(ids.length >= 2);
    assert.ok(ids.slice(1).every((id) => id === `${before.epoch}:${before.seq}`), JSON.stringify(ids));
    await agent.close();
    await sleep(0);
  });
});

describe("HubClient over SSE with tokens", { skip: hubMissing() ?? false }, () => {
  const dir = mkdtempSync(join(tmpdir(), "agui-sse-auth-"));
  const secret = join(dir, "secret");
  writeFileSync(secret, "a test secret that is long enough for HS256 signing", { mode: 0o600 });
  const mint = (scope, thread) =>
    execFileSync(HUB_BIN, ["token", "--secret-file", secret, "--tenant", "t1", "--sub", "tab", "--scope", scope, "--threads", thread], {
      encoding: "utf8",
    }).trim();
  let hub;
  let agents;
  before(async () => {
    agents = await new AgentServer().start();
    hub = await startHub(["--jwt-secret-file", secret, "--agent", `echo=${agents.url("echo")}`]);
  });
  after(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await hub?.stop();
    await agents?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("the stream carries ?access_token= (asked for on each open); runs send it as a bearer header", async () => {
    const thread = threadId("sse-auth");
    let asked = 0;
    const reader = open(hub, thread, { token: () => (asked++, mint("read", thread)) });
    const writer = open(hub, thread, { token: mint("read,write", thread) });
    await Promise.all([reader.whenSynced(), writer.whenSynced()]);
    assert.ok(new URL(reader.socket.url).searchParams.get("access_token"));
    reader.disconnect(); // reopened by the client: a new token
    await reader.waitFor((c) => c.reconnects === 1, { timeout: TIMEOUT });
    assert.equal(asked, 2, "one token for each stream opened");
    const refused = await reader.run("echo", [user("u1", "may I?")]).catch((e) => e);
    assert.equal(refused.code, "forbidden"); // the read-only token reached the hub
    assert.equal(asked, 3, "and one for the request");
    const started = await writer.run("echo", [user("u2", "I may")]);
    await reader.waitFor((c) => c.messages.some((m) => m.id === `reply-${started.runId}`), { timeout: TIMEOUT });
    const anonymous = open(hub, thread, { maxRetries: 2 });
    await assert.rejects(anonymous.connect(), /gave up/);
    assert.equal(anonymous.status, "closed");
  });
});
