// HubClient over a scripted WebSocket: connection lifecycle, resume with since, repairs, edits.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { HubClient, loadMsgpack, threadUrl } from "../src/agui-hub.js";

const msgpack = await loadMsgpack();
const EPOCH = "e1";

/** A WebSocket class whose sockets the test drives from the hub's side. */
function fakeWebSocket() {
  return class FakeSocket {
    static all = [];

    constructor(url, protocols) {
      this.url = new URL(url);
      this.protocols = protocols;
      this.readyState = 0;
      this.protocol = "";
      this.sent = [];
      FakeSocket.all.push(this);
    }

    static get last() {
      return FakeSocket.all[FakeSocket.all.length - 1];
    }

    // -- the hub's side --
    accept(protocol = "") {
      this.readyState = 1;
      this.protocol = protocol;
      this.onopen?.({});
    }

    deliver(...frames) {
      for (const frame of frames) {
        const data = this.protocol ? msgpack.encode(frame) : JSON.stringify(frame);
        this.onmessage?.({
          data: this.protocol ? data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength) : data,
        });
      }
    }

    drop(code = 1006) {
      this.readyState = 3;
      this.onclose?.({ code, reason: "" });
    }

    commands() {
      return this.sent.map((d) => (typeof d === "string" ? JSON.parse(d) : msgpack.decode(d)));
    }

    // -- the client's side --
    send(data) {
      if (this.readyState !== 1) throw new Error("not open");
      this.sent.push(data);
    }

    close(code = 1005, reason = "") {
      if (this.readyState >= 2) return;
      this.readyState = 2;
      queueMicrotask(() => {
        this.readyState = 3;
        this.onclose?.({ code, reason });
      });
    }
  };
}

const tick = () => new Promise((res) => setImmediate(res));
async function until(predicate, what = "condition", timeout = 3_000) {
  const deadline = Date.now() + timeout;
  for (let i = 0; !predicate(); i++) {
    if (Date.now() > deadline) throw new Error(`never happened: ${what}`);
    await (i < 100 ? tick() : new Promise((res) => setTimeout(res, 2)));
  }
}

const welcome = (seq, extra = {}) => ({
  type: "CUSTOM",
  name: "hub.welcome",
  value: { threadId: "doc", seq, epoch: EPOCH, node: "n1", resumed: false, ...extra },
});
const at = (seq, event, sync = false) => ({
  ...event,
  metadata: { ...event.metadata, hub: sync ? { seq, epoch: EPOCH, sync: true } : { seq, epoch: EPOCH } },
});
const join = (seq, state, messages = []) => [
  at(seq, { type: "STATE_SNAPSHOT", snapshot: state }, true),
  at(seq, { type: "MESSAGES_SNAPSHOT", messages }, true),
];
const replace = (seq, path, value) =>
  at(seq, { type: "STATE_DELTA", delta: [{ op: "replace", path, value }] });
const error = (code, message = code) => ({ type: "CUSTOM", name: "hub.error", value: { code, message } });

/** A client connected and joined at `seq` with `state`, and its socket class. */
async function connected(state = { n: 0 }, seq = 1, options = {}) {
  const WebSocket = fakeWebSocket();
  const client = new HubClient({
    url: "ws://hub.test:8787",
    thread: "doc",
    WebSocket,
    backoff: { initial: 1, max: 4 },
    ackInterval: 0,
    ...options,
  });
  const log = [];
  for (const name of [
    "status",
    "state",
    "messages",
    "seq",
    "lag",
    "resync",
    "snapshot",
    "publish",
    "conflict",
    "error",
  ]) {
    client.on(name, (...args) => log.push([name, ...args]));
  }
  await until(() => WebSocket.all.length === 1, "a socket");
  const ws = WebSocket.last;
  ws.accept(options.encoding === "msgpack" ? "agui-hub.msgpack" : "");
  ws.deliver(welcome(seq), ...join(seq, state));
  await client.whenSynced(seq);
  return { client, WebSocket, ws, log };
}

describe("connecting", () => {
  test("opens the thread's consumer URL, with the token, and joins", async () => {
    const { client, ws, log } = await connected({ n: 0 }, 1, { token: "s3cret" });
    assert.equal(ws.url.origin + ws.url.pathname, "ws://hub.test:8787/v1/threads/doc");
    assert.equal(ws.url.searchParams.get("access_token"), "s3cret");
    assert.equal(ws.url.searchParams.get("since"), null);
    assert.equal(ws.protocols, undefined);
    assert.deepEqual(
      log.filter(([n]) => n === "status").map(([, s]) => s),
      ["connecting", "open"],
    );
    assert.deepEqual(client.state, { n: 0 });
    assert.deepEqual(client.snapshots, { join: 1 });
    await client.close();
    assert.equal(client.status, "closed");
  });

  test("offers the msgpack subprotocol and speaks msgpack both ways", async () => {
    const { client, ws } = await connected({ n: 0 }, 1, { encoding: "msgpack" });
    assert.deepEqual(ws.protocols, ["agui-hub.msgpack"]);
    ws.deliver(replace(3, "/n", 3));
    await until(() => client.resyncs.gap === 1);
    assert.deepEqual(ws.commands(), [
      { type: "hub.resync", reason: "gap", holding: { run: null, open: [] } },
    ]);
    assert.ok(ws.sent[0] instanceof Uint8Array, "commands go out as msgpack");
    await client.close();
  });

  test("gives up on a hub that will not speak msgpack", async () => {
    const WebSocket = fakeWebSocket();
    const client = new HubClient({
      url: "ws://h",
      thread: "doc",
      WebSocket,
      encoding: "msgpack",
      autoConnect: false,
    });
    const ready = client.connect();
    await until(() => WebSocket.all.length === 1);
    WebSocket.last.accept("");
    await assert.rejects(ready, /msgpack/);
    assert.equal(client.status, "closed");
    assert.equal(WebSocket.all.length, 1, "no retry");
  });

  test("a hub that refuses for good stops the client; one that is unavailable is retried", async () => {
    const WebSocket = fakeWebSocket();
    const client = new HubClient({
      url: "ws://h",
      thread: "doc",
      WebSocket,
      backoff: { initial: 1, max: 1 },
    });
    await until(() => WebSocket.all.length === 1);
    WebSocket.last.accept();
    WebSocket.last.deliver(error("unavailable"));
    await until(() => WebSocket.all.length === 2, "a retry");
    WebSocket.last.accept();
    WebSocket.last.deliver(error("not_found", "no such thread"));
    await assert.rejects(client.connect(), /not_found/);
    assert.equal(client.status, "closed");
    assert.equal(client.errors.length, 2);
  });

  test("a token function is asked for every connection, and retried when it fails", async () => {
    const WebSocket = fakeWebSocket();
    let calls = 0;
    const token = async () => {
      calls++;
      if (calls === 1) throw new Error("token server down");
      return `t${calls}`;
    };
    const warnings = [];
    const client = new HubClient({
      url: "ws://h",
      thread: "doc",
      WebSocket,
      token,
      backoff: { initial: 1, max: 1 },
      on: { warning: (w) => warnings.push(w) },
    });
    await until(() => WebSocket.all.length === 1);
    assert.equal(WebSocket.last.url.searchParams.get("access_token"), "t2");
    assert.match(warnings[0], /token server down/);
    WebSocket.last.accept();
    WebSocket.last.deliver(welcome(0), ...join(0, {}));
    await client.whenSynced();
    WebSocket.last.drop();
    await until(() => WebSocket.all.length === 2);
    assert.equal(WebSocket.last.url.searchParams.get("access_token"), "t3");
    await client.close();
  });

  test("thread URLs: ids are checked, http becomes ws, a proxy's path prefix is kept", () => {
    assert.equal(threadUrl("http://h:1/hub/", "a.b:c-d_e").url.href, "ws://h:1/hub/v1/threads/a.b:c-d_e");
    assert.equal(threadUrl("https://h", "t").url.href, "wss://h/v1/threads/t");
    assert.equal(threadUrl("ws://h/v1/threads/x1").thread, "x1");
    for (const bad of ["", "-x", "a/b", "a b", "x".repeat(129)]) {
      assert.throws(() => threadUrl("ws://h", bad), TypeError, bad);
    }
    assert.throws(() => new HubClient({ url: "ws://h", thread: "t", WebSocket: undefined }), /WebSocket/);
  });
});

describe("staying right", () => {
  test("applies live events, ignores duplicates, reports state, messages, seq and lag", async () => {
    const { client, ws, log } = await connected();
    log.length = 0;
    ws.deliver(
      replace(2, "/n", 2),
      replace(2, "/n", 99),
      at(3, { type: "TEXT_MESSAGE_START", messageId: "m", role: "assistant" }),
      at(4, { type: "TEXT_MESSAGE_CONTENT", messageId: "m", delta: "hi" }),
    );
    await until(() => client.seq === 4);
    assert.deepEqual(client.state, { n: 2 });
    assert.deepEqual(client.messages, [{ id: "m", role: "assistant", content: "hi" }]);
    assert.deepEqual(
      log.map(([name]) => name),
      ["state", "seq", "messages", "seq", "messages", "seq"],
    );
    ws.deliver({ type: "CUSTOM", name: "hub.heartbeat", value: { seq: 4, epoch: EPOCH } });
    assert.equal(client.lag, 0);
    await client.close();
  });

  test("a failed patch asks for a snapshot over the socket; the snapshot repairs the copy", async () => {
    const { client, ws, log } = await connected({ doc: { n: 0 } });
    client.mirror.corrupt("/doc", "broken");
    ws.deliver(replace(2, "/doc/n", 2), replace(3, "/doc/n", 3));
    await until(() => client.resyncs.patch_failed === 1);
    assert.equal(client.inSync, false);
    assert.deepEqual(ws.commands(), [
      { type: "hub.resync", reason: "patch_failed", holding: { run: null, open: [] } },
    ]);
    ws.deliver(...join(3, { doc: { n: 3 } }));
    await client.whenSynced(3);
    assert.deepEqual(client.state, { doc: { n: 3 } });
    assert.deepEqual(client.snapshots, { join: 1, patch_failed: 1 });
    assert.ok(log.some(([name, value]) => name === "resync" && value.reason === "patch_failed"));
    await client.close();
  });

  test("an unrequested snapshot (the hub conflated a slow socket) is counted as such", async () => {
    const { client, ws } = await connected();
    ws.deliver(...join(50, { n: 50 }), replace(51, "/n", 51));
    await until(() => client.seq === 51);
    assert.deepEqual(client.snapshots, { join: 1, unrequested: 1 });
    assert.deepEqual(client.resyncs, {});
    await client.close();
  });

  test("a heartbeat ahead of the copy shows the lag and repairs the lost tail", async () => {
    const { client, ws, log } = await connected();
    ws.deliver({ type: "CUSTOM", name: "hub.heartbeat", value: { seq: 7, epoch: EPOCH } });
    await until(() => client.resyncs.gap === 1);
    assert.equal(client.lag, 6);
    assert.ok(log.some(([name, lag]) => name === "lag" && lag === 6));
    ws.deliver(...join(7, { n: 7 }));
    await until(() => client.lag === 0);
    await client.close();
  });

  test("acks its position every ackInterval", async () => {
    const { client, ws } = await connected({ n: 0 }, 1, { ackInterval: 5 });
    ws.deliver(replace(2, "/n", 2));
    await until(() => ws.commands().some((c) => c.type === "hub.ack" && c.seq === 2), "an ack");
    await client.close();
  });
});

describe("reconnecting", () => {
  test("after a drop it resumes with since and epoch and the hub replays", async () => {
    const { client, WebSocket, ws, log } = await connected({ n: 0 }, 1);
    ws.deliver(replace(2, "/n", 2));
    await until(() => client.seq === 2);
    ws.drop(1006);
    await until(() => WebSocket.all.length === 2, "a reconnect");
    const again = WebSocket.last;
    assert.equal(again.url.searchParams.get("since"), "2");
    assert.equal(again.url.searchParams.get("epoch"), EPOCH);
    again.accept();
    again.deliver(welcome(3, { resumed: true }), replace(3, "/n", 3));
    await until(() => client.seq === 3);
    assert.deepEqual(client.state, { n: 3 });
    assert.deepEqual(client.snapshots, { join: 1 }, "a replay, no snapshot");
    assert.equal(client.reconnects, 1);
    assert.deepEqual(client.closeCodes, [1006]);
    const statuses = log.filter(([n]) => n === "status").map(([, s, d]) => [s, d.willReconnect ?? false]);
    assert.deepEqual(statuses.slice(2), [
      ["closed", true],
      ["connecting", false],
      ["open", false],
    ]);
    const retryIn = log.find(([n, , d]) => n === "status" && d.willReconnect)[2].retryIn;
    assert.ok(retryIn >= 0.5 && retryIn <= 1, `first retry in [initial/2, initial]: ${retryIn}`);
    await client.close();
  });

  test("a resume the hub cannot serve is a fresh join, counted by why", async () => {
    const { client, WebSocket, ws } = await connected({ n: 0 }, 1);
    ws.drop(4009); // a draining node
    await until(() => WebSocket.all.length === 2);
    WebSocket.last.accept();
    WebSocket.last.deliver(welcome(90, { resumed: false }), ...join(90, { n: 90 }));
    await client.whenSynced(90);
    WebSocket.last.drop();
    await until(() => WebSocket.all.length === 3);
    WebSocket.last.accept();
    WebSocket.last.deliver(
      welcome(1, { resumed: false, epoch: "e2" }),
      ...join(1, { fresh: true }).map((f) => ({
        ...f,
        metadata: { hub: { seq: 1, epoch: "e2", sync: true } },
      })),
    );
    await until(() => client.epoch === "e2" && client.inSync);
    assert.deepEqual(client.snapshots, { join: 1, resume_too_old: 1, epoch_changed: 1 });
    assert.deepEqual(client.state, { fresh: true });
    await client.close();
  });

  test("a copy waiting for a snapshot reconnects without since (replaying cannot repair it)", async () => {
    const { client, WebSocket, ws } = await connected({ n: 0 }, 1);
    ws.deliver(replace(5, "/n", 5)); // a gap
    await until(() => !client.inSync);
    ws.drop();
    await until(() => WebSocket.all.length === 2);
    assert.equal(WebSocket.last.url.searchParams.get("since"), null);
    await client.close();
  });

  test("a silent connection is presumed dead after idleTimeout and replaced", async () => {
    const { client, WebSocket } = await connected({ n: 0 }, 1, { idleTimeout: 20 });
    await until(() => WebSocket.all.length === 2, "a reconnect after silence");
    assert.equal(WebSocket.last.url.searchParams.get("since"), "1");
    await client.close();
  });

  test("close() is final: no reconnect, status closed", async () => {
    const { client, WebSocket } = await connected();
    await client.close();
    await tick();
    assert.equal(WebSocket.all.length, 1);
    assert.equal(client.status, "closed");
    await assert.rejects(client.connect(), /closed/);
  });
});

describe("publishing edits", () => {
  test("an accepted edit is acked with the seq it landed at; the state changes when it comes back", async () => {
    const { client, ws } = await connected({ title: "Draft", n: 0 });
    const done = client.publish([{ op: "replace", path: "/title", value: "Final" }], { test: true });
    await tick();
    const [command] = ws.commands();
    assert.equal(command.type, "hub.publish");
    assert.equal(command.base, 1);
    assert.deepEqual(command.event.delta, [
      { op: "test", path: "/title", value: "Draft" },
      { op: "replace", path: "/title", value: "Final" },
    ]);
    assert.match(command.event.metadata.edit, /^[a-z0-9]+-1$/);
    assert.deepEqual(client.state, { title: "Draft", n: 0 }, "confirmed state: unchanged");
    assert.deepEqual(client.optimisticState, { title: "Final", n: 0 }, "what the UI shows");
    ws.deliver(replace(2, "/n", 1)); // someone else's edit first
    ws.deliver(at(3, command.event)); // then ours, sequenced
    const outcome = await done;
    assert.deepEqual([outcome.ok, outcome.status, outcome.seq], [true, "acked", 3]);
    assert.deepEqual(client.state, { title: "Final", n: 1 });
    assert.equal(client.optimisticState, client.state);
    await client.close();
  });

  test("a conflicting edit is reported, and the snapshot that follows is counted as a conflict", async () => {
    const { client, ws, log } = await connected({ title: "Draft" });
    const outcome = client.publish([{ op: "replace", path: "/title", value: "Mine" }], { test: ["/title"] });
    await tick();
    ws.deliver(error("conflict", "edit rejected: test failed"), ...join(2, { title: "Theirs" }));
    assert.deepEqual(
      { ...(await outcome), event: undefined, id: undefined },
      {
        ok: false,
        status: "conflict",
        code: "conflict",
        message: "edit rejected: test failed",
        event: undefined,
        id: undefined,
      },
    );
    await client.whenSynced(2);
    assert.deepEqual(client.state, { title: "Theirs" });
    assert.equal(client.conflicts, 1);
    assert.deepEqual(client.snapshots, { join: 1, conflict: 1 });
    assert.equal(log.filter(([n]) => n === "conflict").length, 1);
    await client.close();
  });

  test("edits go out one at a time, so every answer is unambiguous", async () => {
    const { client, ws } = await connected({ a: 0, b: 0 });
    const first = client.publish([{ op: "replace", path: "/a", value: 1 }]);
    const second = client.publish([{ op: "replace", path: "/b", value: 1 }], { test: { "/b": 0 } });
    const third = client.publish([{ op: "remove", path: "/zzz" }]);
    await tick();
    assert.equal(ws.commands().length, 1, "only the first is sent");
    assert.equal(client.pending.length, 3);
    assert.deepEqual(
      client.optimisticState,
      { a: 1, b: 1 },
      "pending edits shown; one that cannot apply left out",
    );
    ws.deliver(at(2, ws.commands()[0].event));
    assert.equal((await first).status, "acked");
    await tick();
    assert.equal(ws.commands().length, 2);
    ws.deliver(error("malformed_patch", "bad"));
    assert.deepEqual([(await second).status, (await second).code], ["rejected", "malformed_patch"]);
    await tick();
    ws.deliver(error("conflict"), ...join(2, { a: 1, b: 0 }));
    assert.equal((await third).status, "conflict");
    assert.equal(client.pending.length, 0);
    await client.close();
  });

  test("test ops are taken from what the caller sees, pending edits included", async () => {
    const { client, ws } = await connected({ title: "Draft" });
    const first = client.publish([{ op: "replace", path: "/title", value: "A" }], { test: true });
    const second = client.publish([{ op: "replace", path: "/title", value: "B" }], { test: true });
    await tick();
    ws.deliver(at(2, ws.commands()[0].event));
    assert.equal((await first).status, "acked");
    await tick();
    assert.deepEqual(ws.commands()[1].event.delta[0], { op: "test", path: "/title", value: "A" });
    ws.deliver(at(3, ws.commands()[1].event));
    assert.equal((await second).status, "acked");
    assert.deepEqual(client.state, { title: "B" });
    await client.close();
  });

  test("no answer: timeout, a dropped connection and close() settle edits as unknown or cancelled", async () => {
    const { client, WebSocket, ws } = await connected({ a: 0 }, 1, { publishTimeout: 10 });
    const timedOut = await client.publish([{ op: "replace", path: "/a", value: 1 }]);
    assert.deepEqual([timedOut.ok, timedOut.status, timedOut.reason], [false, "unknown", "timeout"]);
    assert.deepEqual(timedOut.event, ws.commands()[0].event);
    const inFlight = client.publish([{ op: "replace", path: "/a", value: 2 }], { timeout: 0 });
    await tick();
    ws.drop();
    assert.deepEqual([(await inFlight).status, (await inFlight).reason], ["unknown", "disconnected"]);
    const queued = client.publish([{ op: "replace", path: "/a", value: 3 }]);
    await until(() => WebSocket.all.length === 2);
    await client.close();
    assert.deepEqual([(await queued).status, (await queued).reason], ["cancelled", "closed"]);
    const afterClose = await client.publish([{ op: "replace", path: "/a", value: 4 }]);
    assert.deepEqual([afterClose.status, afterClose.reason], ["cancelled", "closed"]);
  });

  test("edits made while disconnected are sent once the connection is back", async () => {
    const { client, WebSocket, ws } = await connected({ a: 0 });
    ws.drop();
    const later = client.publish([{ op: "replace", path: "/a", value: 1 }]);
    await until(() => WebSocket.all.length === 2);
    const again = WebSocket.last;
    again.accept();
    again.deliver(welcome(1, { resumed: true }));
    await until(() => again.commands().length === 1);
    again.deliver(at(2, again.commands()[0].event));
    assert.equal((await later).status, "acked");
    await client.close();
  });

  test("a malformed edit is the caller's bug and throws at once", async () => {
    const { client } = await connected();
    assert.throws(() => client.publish({ op: "add" }));
    assert.throws(() => client.publish([{ op: "add", path: "/x" }]));
    assert.throws(() => client.publish([{ op: "remove", path: "/x" }], { test: ["/missing"] }), /no value/);
    await client.close();
  });

  test("replaceState proposes a whole state against a base position", async () => {
    const { client, ws } = await connected({ a: 0 }, 4);
    const done = client.replaceState({ b: 1 });
    await tick();
    assert.deepEqual(ws.commands()[0].base, 4);
    assert.equal(ws.commands()[0].event.type, "STATE_SNAPSHOT");
    ws.deliver(at(5, ws.commands()[0].event));
    assert.equal((await done).seq, 5);
    assert.deepEqual(client.state, { b: 1 });
    await client.close();
  });
});

describe("runs", () => {
  test("a run waits for the edit in flight, and an edit for the run in flight: answers are unambiguous", async () => {
    const { client, ws } = await connected({ a: 0 });
    const edit = client.publish([{ op: "replace", path: "/a", value: 1 }]);
    const run = client.run("writer", [{ id: "u1", role: "user", content: "go" }], { context: [] });
    const later = client.publish([{ op: "replace", path: "/a", value: 2 }]);
    await tick();
    assert.deepEqual(
      ws.commands().map((c) => c.type),
      ["hub.publish"],
      "the run waits for the edit's answer",
    );
    ws.deliver(at(2, ws.commands()[0].event));
    assert.equal((await edit).status, "acked");
    await tick();
    const sent = ws.commands()[1];
    assert.deepEqual(sent, {
      type: "hub.run",
      agent: "writer",
      messages: [{ id: "u1", role: "user", content: "go" }],
      tools: [],
      context: [],
      forwardedProps: {},
    });
    assert.equal(ws.commands().length, 2, "the next edit waits for the run's answer");
    ws.deliver({ type: "CUSTOM", name: "hub.run", value: { threadId: "doc", runId: "r1" } });
    assert.deepEqual(await run, { threadId: "doc", runId: "r1" });
    await tick();
    assert.equal(ws.commands()[2].type, "hub.publish");
    ws.deliver(error("conflict"), ...join(2, { a: 1 }));
    assert.equal((await later).status, "conflict");
    await client.close();
  });

  test("a refused run rejects with the hub's code; a dropped connection with disconnected", async () => {
    const { client, ws, WebSocket } = await connected();
    const busy = client.run("writer");
    await tick();
    ws.deliver(error("run_in_progress", "one at a time"));
    await assert.rejects(busy, { name: "HubRunError", code: "run_in_progress" });
    const lost = client.run("writer");
    await tick();
    ws.drop();
    await assert.rejects(lost, { code: "disconnected" });
    await until(() => WebSocket.all.length === 2, "a reconnect");
    await client.close();
  });

  test("cancel() settles when the run ends, or rejects with unknown_run", async () => {
    const { client, ws } = await connected();
    ws.deliver(at(2, { type: "RUN_STARTED", threadId: "doc", runId: "r1" }));
    const cancelled = client.cancel("r1");
    await tick();
    assert.deepEqual(ws.commands().at(-1), { type: "hub.cancel", runId: "r1" });
    ws.deliver(at(3, { type: "RUN_ERROR", message: "the run was cancelled", code: "cancelled" }));
    assert.deepEqual(await cancelled, { runId: "r1", type: "RUN_ERROR", code: "cancelled" });
    const unknown = client.cancel("r1");
    await tick();
    ws.deliver(error("unknown_run"));
    await assert.rejects(unknown, { code: "unknown_run" });
    assert.throws(() => client.cancel(""), TypeError);
    await client.close();
  });
});
