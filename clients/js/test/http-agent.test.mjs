// HubHttpAgent: the official HttpAgent whose connect() posts to a real hub's
// `POST /v1/agents/{NAME}/connect`. connectAgent() on a fresh agent (a tab that reloads) ends
// holding exactly the hub's view of the thread: its history when idle, the open run followed
// to its end, nothing for a thread nobody wrote; tokens go as HttpAgent's headers.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { HubHttpAgent, withoutHubMetadata } from "../src/agent.js";
import { AgentServer } from "../test-support/agents.mjs";
import { Agent, HUB_BIN, hubMissing, sleep, startHub, threadId } from "../test-support/hub.mjs";

const TIMEOUT = 10_000;
const START = { type: "STATE_SNAPSHOT", snapshot: { doc: { title: "Draft", n: 0 } } };
const user = (id, content) => ({ id, role: "user", content });

/** The official client copies a streamed start event's metadata (the hub's position) into the
 * message it builds; the thread's messages have none. */
const plain = (messages) => messages.map((m) => withoutHubMetadata(m));

/** connectAgent(), recording what its subscriber sees; `done` is set once it settles. */
function connecting(agent, parameters = {}) {
  const seen = [];
  const call = {
    seen,
    done: false,
    warnings: [],
  };
  const { warn, error } = console;
  console.warn = console.error = (...args) => call.warnings.push(args.join(" "));
  call.promise = agent
    .connectAgent(parameters, { onEvent: ({ event }) => seen.push(event) })
    .finally(() => {
      call.done = true;
      Object.assign(console, { warn, error });
    });
  return call;
}

/** `promise`'s rejection, with the official client's console report of it kept out of the log. */
async function rejection(promise) {
  const { error } = console;
  const reported = [];
  console.error = (...args) => reported.push(args.join(" "));
  try {
    await promise;
  } catch (err) {
    assert.ok(reported.some((line) => line.includes(err.message)), "the client reported it");
    return err;
  } finally {
    console.error = error;
  }
  assert.fail("it resolved");
}

async function until(what, probe, timeout = TIMEOUT) {
  const deadline = Date.now() + timeout;
  while (!probe()) {
    if (Date.now() > deadline) throw new Error(`${what} (after ${timeout} ms)`);
    await sleep(10);
  }
}

/** The agent holds the hub's state and messages (`view`: GET /v1/threads/{id}). */
function assertHolds(agent, view) {
  assert.deepEqual(agent.state, view.state);
  assert.deepEqual(plain(agent.messages), view.messages);
}

describe("HubHttpAgent on a real hub", { skip: hubMissing() ?? false }, () => {
  let hub;
  let agents;
  before(async () => {
    agents = await new AgentServer().start();
    hub = await startHub(["--agent", `echo=${agents.url("echo")}`]);
  });
  after(async () => {
    await hub?.stop();
    await agents?.close();
  });

  const tab = (thread, config = {}) => new HubHttpAgent({ url: `${hub.http}/v1/agents/echo`, threadId: thread, ...config });

  test("after a finished run, a fresh tab's connectAgent gets the thread's history as one run", async () => {
    const thread = threadId("http-history");
    const writer = tab(thread);
    writer.addMessage(user("u1", "hello hub"));
    await writer.runAgent(); // HttpAgent's run: POST /v1/agents/echo
    const view = await hub.thread(thread);
    assert.equal(view.run, null);
    assert.equal(view.messages.at(-1).content, "You said “hello hub”");

    const reader = tab(thread); // a tab that reloaded: nothing of its own
    const call = connecting(reader);
    const { newMessages } = await call.promise;
    assert.deepEqual(call.warnings, []);
    assert.deepEqual(
      call.seen.map((e) => e.type),
      ["RUN_STARTED", "STATE_SNAPSHOT", "MESSAGES_SNAPSHOT", "RUN_FINISHED"],
    );
    assert.equal(call.seen[0].threadId, thread);
    assertHolds(reader, view);
    assert.deepEqual(reader.messages, view.messages, "snapshots carry no hub positions into messages");
    assert.deepEqual(
      newMessages.map((m) => m.id),
      view.messages.map((m) => m.id),
    );
    assert.equal(reader.isRunning, false);
    // The writer ran it over the same endpoint: it holds the same thread.
    assert.deepEqual(writer.state, view.state);
    assert.deepEqual(plain(writer.messages), view.messages);
  });

  test("mid-run, connectAgent gets the run so far, then follows it live and ends with its RUN_FINISHED", async () => {
    const thread = threadId("http-midrun");
    const producer = await Agent.open(hub, thread);
    producer.send(
      START,
      { type: "RUN_STARTED", threadId: thread, runId: "r1" },
      { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "Hel" },
      { type: "STATE_DELTA", delta: [{ op: "replace", path: "/doc/n", value: 1 }] },
    );
    assert.deepEqual(await producer.flush(), []);

    const agent = tab(thread);
    const call = connecting(agent);
    // The join: the run's own RUN_STARTED, the snapshots, the text streamed so far.
    await until("the connect joined the open run", () =>
      agent.messages.some((m) => m.id === "m1" && m.content === "Hel"),
    );
    assert.equal(call.seen[0].type, "RUN_STARTED");
    assert.equal(call.seen[0].runId, "r1");
    assert.deepEqual(agent.state, { doc: { title: "Draft", n: 1 } });
    const joined = call.seen.length;

    producer.send(
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "lo" },
      { type: "TEXT_MESSAGE_END", messageId: "m1" },
      { type: "STATE_DELTA", delta: [{ op: "replace", path: "/doc/title", value: "Final" }] },
    );
    assert.deepEqual(await producer.flush(), []);
    await until("the live events arrived", () => agent.state.doc?.title === "Final");
    await sleep(200);
    assert.equal(call.done, false, "still following the open run");
    assert.equal(agent.isRunning, true);

    producer.send(
      { type: "TEXT_MESSAGE_START", messageId: "m2", role: "assistant" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m2", delta: "Bye" },
      { type: "TEXT_MESSAGE_END", messageId: "m2" },
      { type: "RUN_FINISHED", threadId: thread, runId: "r1" },
    );
    assert.deepEqual(await producer.flush(), []);
    const { newMessages } = await call.promise;
    assert.deepEqual(call.warnings, []);

    const types = call.seen.map((e) => e.type);
    assert.equal(types.filter((t) => t === "RUN_STARTED").length, 1);
    assert.equal(types.at(-1), "RUN_FINISHED");
    assert.equal(call.seen.at(-1).runId, "r1");
    assert.deepEqual(types.slice(joined), [
      "TEXT_MESSAGE_CONTENT",
      "TEXT_MESSAGE_END",
      "STATE_DELTA",
      "TEXT_MESSAGE_START",
      "TEXT_MESSAGE_CONTENT",
      "TEXT_MESSAGE_END",
      "RUN_FINISHED",
    ]);
    const view = await hub.thread(thread);
    assert.equal(view.run, null);
    assertHolds(agent, view);
    assert.deepEqual(
      agent.messages.map((m) => m.content),
      ["Hello", "Bye"],
    );
    assert.deepEqual(
      newMessages.map((m) => m.id),
      ["m1", "m2"],
    );
    assert.equal(agent.isRunning, false);
    await producer.close();
  });

  test("abortRun() ends a connect that follows a run; the next connectAgent connects anew", async () => {
    const thread = threadId("http-abort");
    const producer = await Agent.open(hub, thread);
    producer.send(
      START,
      { type: "RUN_STARTED", threadId: thread, runId: "r1" },
      { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "Hel" },
    );
    assert.deepEqual(await producer.flush(), []);
    const agent = tab(thread);
    const first = connecting(agent);
    await until("the connect joined the open run", () => agent.messages.some((m) => m.content === "Hel"));
    agent.abortRun(); // as HttpAgent's: its AbortController; the run goes on at the hub
    await first.promise;
    assert.deepEqual(
      first.seen.slice(-1).map((e) => [e.type, e.code]),
      [["RUN_ERROR", "abort"]],
    );
    assert.equal(agent.isRunning, false);
    assert.notEqual((await hub.thread(thread)).run, null, "the hub's run is still open");

    const again = connecting(agent); // a fresh AbortController, as runAgent takes one
    await until("the second connect joined", () => again.seen.some((e) => e.type === "TEXT_MESSAGE_CONTENT"));
    producer.send(
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "lo" },
      { type: "TEXT_MESSAGE_END", messageId: "m1" },
      { type: "RUN_FINISHED", threadId: thread, runId: "r1" },
    );
    assert.deepEqual(await producer.flush(), []);
    await again.promise;
    assert.deepEqual(again.warnings, []);
    assert.equal(again.seen.at(-1).type, "RUN_FINISHED");
    assertHolds(agent, await hub.thread(thread));
    assert.equal(agent.messages[0].content, "Hello");
    await producer.close();
  });

  test("a thread nobody wrote: connectAgent resolves with nothing", async () => {
    const agent = tab(threadId("http-empty"));
    const call = connecting(agent);
    const result = await call.promise;
    assert.deepEqual(call.seen, []);
    assert.deepEqual(call.warnings, []);
    assert.deepEqual(result.newMessages, []);
    assert.deepEqual(agent.messages, []);
    assert.deepEqual(agent.state, {});
  });

  test("connect() posts HttpAgent's own request to ${url}/connect, through its fetch", async () => {
    const thread = threadId("http-request");
    const posted = [];
    const agent = tab(thread, {
      url: `${hub.http}/v1/agents/anyone/`, // a name the hub does not run, a trailing slash
      headers: { "X-Tab": "7" },
      fetch: (url, init) => (posted.push({ url, init }), fetch(url, init)),
    });
    agent.addMessage(user("u1", "mine"));
    const call = connecting(agent);
    await call.promise;
    assert.equal(posted.length, 1);
    assert.equal(posted[0].url, `${hub.http}/v1/agents/anyone/connect`);
    const { method, headers, body } = posted[0].init;
    assert.equal(method, "POST");
    assert.deepEqual(headers, { "X-Tab": "7", "Content-Type": "application/json", Accept: "text/event-stream" });
    const input = JSON.parse(body);
    assert.equal(input.threadId, thread);
    assert.deepEqual(input.messages, [user("u1", "mine")]);
    // Only threadId is read: the thread is still nobody's, and the tab keeps its own message.
    assert.equal((await hub.thread(thread)).seq, 0);
    assert.deepEqual(agent.messages, [user("u1", "mine")]);
  });
});

describe("HubHttpAgent on a hub that needs tokens", { skip: hubMissing() ?? false }, () => {
  const dir = mkdtempSync(join(tmpdir(), "agui-http-agent-"));
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
    await hub?.stop();
    await agents?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test("a bearer token in HttpAgent's headers connects; none, or one for another thread, rejects", async () => {
    const thread = threadId("http-auth");
    const url = `${hub.http}/v1/agents/echo`;
    const bearer = (token) => ({ Authorization: `Bearer ${token}` });
    const writer = new HubHttpAgent({ url, threadId: thread, headers: bearer(mint("read,write", thread)) });
    writer.addMessage(user("u1", "with a token"));
    await writer.runAgent();
    const read = mint("read", thread);
    const { status, body } = await hub.get(`/v1/threads/${thread}?access_token=${read}`);
    assert.equal(status, 200, body);
    const view = JSON.parse(body);
    assert.equal(view.messages.at(-1).content, "You said “with a token”");

    const reader = new HubHttpAgent({ url, threadId: thread, headers: bearer(read) });
    await reader.connectAgent();
    assertHolds(reader, view);

    // The token in the query (`?access_token=`) goes on the connect as well.
    const queried = new HubHttpAgent({ url: `${url}?access_token=${read}`, threadId: thread });
    assert.equal(queried.connectUrl, `${url}/connect?access_token=${read}`);
    await queried.connectAgent();
    assertHolds(queried, view);

    const anonymous = new HubHttpAgent({ url, threadId: thread });
    const refused = await rejection(anonymous.connectAgent());
    assert.ok(refused instanceof Error);
    assert.equal(refused.status, 401);
    assert.deepEqual(anonymous.messages, []);
    assert.equal(anonymous.isRunning, false);

    const elsewhere = new HubHttpAgent({ url, threadId: thread, headers: bearer(mint("read", "elsewhere")) });
    const forbidden = await rejection(elsewhere.connectAgent());
    assert.equal(forbidden.status, 403);
    assert.equal(forbidden.payload.code, "forbidden");
  });
});
