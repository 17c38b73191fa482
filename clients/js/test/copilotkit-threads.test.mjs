// AguiHubRunner's thread methods (CopilotKit's LocalThreadEndpointRunner-style: list, messages,
// events, state, update, delete, clear) on a real hub, called directly and through a
// CopilotRuntime's HTTP routes (`GET /threads`, `GET /threads/{id}/messages|events|state`,
// `PATCH`/`DELETE /threads/{id}`, `POST /threads/{id}/archive`, `POST /threads/clear`), which the
// runner's threadHooks() serve from the hub.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import WebSocket from "ws";

import { StreamingAgent, replyText } from "../test-support/copilotkit-agent.mjs";
import { hubMissing, sleep, startHub, threadId } from "../test-support/hub.mjs";

process.env.COPILOTKIT_TELEMETRY_DISABLED = "true";
const { CopilotRuntime, createCopilotRuntimeHandler } = await import("@copilotkit/runtime/v2");
const { AguiHubRunner } = await import("../src/copilotkit.js");

/** Run `agentId`'s StreamingAgent on `thread` through `runner` to its end: the events. */
function runOn(runner, thread, agentId, { runId = `r-${thread}`, words = 3, hangAfter = null } = {}) {
  const messages = [{ id: `u-${runId}`, role: "user", content: "Stream" }];
  const agent = new StreamingAgent({ agentId, threadId: thread, initialMessages: messages });
  const input = { threadId: thread, runId, state: {}, messages, tools: [], context: [], forwardedProps: { words, step: 2, hangAfter } };
  const seen = [];
  const done = new Promise((resolve, reject) =>
    runner.run({ threadId: thread, agent, input }).subscribe({ next: (e) => seen.push(e), error: reject, complete: () => resolve(seen) }),
  );
  const settled = done.then(
    () => null,
    (err) => err,
  ); // for a test that expects the run to fail: no unhandled rejection meanwhile
  return { seen, done, settled };
}

async function until(what, probe, timeout = 8_000) {
  const deadline = Date.now() + timeout;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`${what} (after ${timeout} ms)`);
    await sleep(10);
  }
}

describe("AguiHubRunner's threads on a real hub", { skip: hubMissing() ?? false }, () => {
  let hub;
  let runner;
  before(async () => {
    hub = await startHub();
    runner = new AguiHubRunner({ url: hub.http, WebSocket });
  });
  after(async () => {
    await hub?.stop();
  });

  test("list, messages, state, events, rename, archive, delete, clear: what the hub holds", async () => {
    const [d1, d2, o1] = [threadId("th-d1"), threadId("th-d2"), threadId("th-o1")];
    await runOn(runner, d1, "default").done;
    await runOn(runner, o1, "other", { words: 2 }).done;
    await runOn(runner, d2, "default", { words: 5 }).done;

    // Most recently changed first; the CopilotKit agent as run() recorded it.
    const all = await runner.listThreads();
    const ours = all.threads.filter((t) => [d1, d2, o1].includes(t.id));
    assert.deepEqual(ours.map((t) => [t.id, t.agentId]), [[d2, "default"], [o1, "other"], [d1, "default"]]);
    const record = ours[0];
    assert.equal(record.name, null);
    assert.equal(record.archived, false);
    assert.equal(record.running, false);
    assert.ok(Date.parse(record.createdAt) <= Date.parse(record.updatedAt));
    assert.deepEqual(
      (await runner.listThreads({ agentId: "default" })).threads.map((t) => t.id).filter((id) => [d1, d2, o1].includes(id)),
      [d2, d1],
    );

    // Pages: one at a time, each thread once, to the end.
    const walked = [];
    let cursor;
    do {
      const page = await runner.listThreads({ limit: 1, cursor });
      assert.ok(page.threads.length <= 1);
      walked.push(...page.threads.map((t) => t.id));
      cursor = page.nextCursor;
    } while (cursor);
    assert.deepEqual(walked, all.threads.map((t) => t.id));

    const view = await hub.thread(d2);
    assert.deepEqual(await runner.getThreadMessages(d2), view.messages);
    assert.equal(view.messages.at(-1).content, replyText(5));
    assert.deepEqual(await runner.getThreadState(d2), { doc: { title: "Streamed" }, words: 5 });
    assert.deepEqual(await runner.getThreadEvents(d2), [
      { type: "STATE_SNAPSHOT", snapshot: view.state },
      { type: "MESSAGES_SNAPSHOT", messages: view.messages },
    ]);
    const nobody = threadId("th-none");
    assert.deepEqual(await runner.getThreadMessages(nobody), []);
    assert.equal(await runner.getThreadState(nobody), null);
    assert.deepEqual(await runner.getThreadEvents(nobody), []);

    // Rename and archive: an archived thread is listed only when asked for.
    const renamed = await runner.updateThread(d1, { name: "First", archived: true });
    assert.equal(renamed.name, "First");
    assert.equal(renamed.archived, true);
    assert.equal(renamed.agentId, "default", "the tag survives a rename");
    assert.ok(!(await runner.listThreads()).threads.some((t) => t.id === d1));
    assert.equal((await runner.listThreads({ includeArchived: true })).threads.find((t) => t.id === d1)?.name, "First");
    assert.equal(await runner.updateThread(nobody, { name: "x" }), null, "nobody wrote it");

    // Delete: gone from the list and the store.
    assert.equal(await runner.deleteThread(d2), true);
    assert.equal(await runner.deleteThread(d2), false);
    assert.equal((await hub.thread(d2)).epoch, null);
    assert.ok(!(await runner.listThreads({ includeArchived: true })).threads.some((t) => t.id === d2));

    // Clear one agent's threads (the archived one too); the other agent's stay.
    assert.equal(await runner.clearThreads({ agentId: "default" }), 1);
    const left = (await runner.listThreads({ includeArchived: true })).threads.map((t) => t.id);
    assert.ok(!left.includes(d1));
    assert.ok(left.includes(o1));
  });

  test("an open run: the list says running, events start with its RUN_STARTED; a delete cancels it", async () => {
    const thread = threadId("th-open");
    const run = runOn(runner, thread, "default", { runId: "open-1", words: 9, hangAfter: 2 });
    await until("the run streams", () => run.seen.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").length === 2);
    assert.equal((await runner.listThreads()).threads.find((t) => t.id === thread)?.running, true);
    const events = await runner.getThreadEvents(thread);
    assert.deepEqual(events[0], { type: "RUN_STARTED", threadId: thread, runId: "open-1" });
    assert.equal(events[2].messages.at(-1).content, replyText(2));
    assert.equal(await runner.deleteThread(thread), true);
    // The run ends with a RUN_ERROR: thread_deleted (the hub's answer on the agent socket; run()
    // errors after it), or cancelled should the thread's watch see the cancel first.
    const err = await run.settled;
    const end = run.seen.at(-1);
    assert.equal(end.type, "RUN_ERROR");
    assert.ok(["thread_deleted", "cancelled"].includes(end.code), end.code);
    if (end.code === "thread_deleted") assert.equal(err?.code, "thread_deleted");
    assert.equal(await runner.isRunning({ threadId: thread }), false);
    assert.equal((await hub.thread(thread)).epoch, null);
  });
});

describe("CopilotRuntime's thread routes with AguiHubRunner.threadHooks()", { skip: hubMissing() ?? false }, () => {
  let hub;
  let runner;
  let handler;
  const call = (h, method, path, body) =>
    h(
      new Request(`http://runtime.test/api${path}`, {
        method,
        headers: body ? { "Content-Type": "application/json" } : {},
        body: body ? JSON.stringify(body) : undefined,
      }),
    );
  before(async () => {
    hub = await startHub();
    runner = new AguiHubRunner({ url: hub.http, WebSocket });
    const runtime = new CopilotRuntime({ agents: { default: new StreamingAgent() }, runner });
    handler = createCopilotRuntimeHandler({ runtime, basePath: "/api", hooks: runner.threadHooks() });
  });
  after(async () => {
    await hub?.stop();
  });

  test("without the hooks the runtime serves no threads from the runner (422), and /info says so", async () => {
    const bare = new AguiHubRunner({ url: hub.http, WebSocket });
    assert.equal(bare.ɵsupportsLocalThreadEndpoints, false);
    const plain = createCopilotRuntimeHandler({
      runtime: new CopilotRuntime({ agents: { default: new StreamingAgent() }, runner: bare }),
      basePath: "/api",
    });
    assert.equal((await call(plain, "GET", "/threads?agentId=default")).status, 422);
    const info = await (await call(plain, "GET", "/info")).json();
    assert.equal(info.threadEndpoints?.list, false);
    const served = await (await call(handler, "GET", "/info")).json();
    assert.equal(served.threadEndpoints?.list, true);
    assert.equal(served.threadEndpoints?.inspect, true);
  });

  test("a run through the runtime, then its thread listed, read, renamed, archived and deleted over HTTP", async () => {
    const thread = threadId("th-http");
    const input = {
      threadId: thread,
      runId: "h-1",
      state: {},
      messages: [{ id: "u-h-1", role: "user", content: "Stream" }],
      tools: [],
      context: [],
      forwardedProps: { words: 4, step: 2 },
    };
    const response = await call(handler, "POST", "/agent/default/run", input);
    assert.equal(response.status, 200);
    await response.text(); // to the run's end
    const view = await hub.thread(thread);
    assert.equal(view.run, null);

    const listed = await (await call(handler, "GET", "/threads?agentId=default")).json();
    assert.equal(listed.threads[0].id, thread);
    assert.equal(listed.threads[0].agentId, "default", "the runtime's agent id, recorded by the run");
    assert.ok("nextCursor" in listed);
    const other = await (await call(handler, "GET", "/threads?agentId=nobody")).json();
    assert.ok(!other.threads.some((t) => t.id === thread));

    const { messages } = await (await call(handler, "GET", `/threads/${thread}/messages`)).json();
    assert.deepEqual(messages[0], { id: "u-h-1", role: "user", content: "Stream" });
    const reply = view.messages.at(-1);
    assert.deepEqual(messages[1], {
      id: reply.id,
      role: "assistant",
      content: replyText(4),
      toolCalls: [{ id: reply.toolCalls[0].id, name: "set_title", args: '{"title":"Streamed"}' }],
    });
    assert.deepEqual((await (await call(handler, "GET", `/threads/${thread}/state`)).json()).state, view.state);
    const { events } = await (await call(handler, "GET", `/threads/${thread}/events`)).json();
    assert.deepEqual(events.map((e) => e.type), ["STATE_SNAPSHOT", "MESSAGES_SNAPSHOT"]);
    assert.deepEqual((await (await call(handler, "GET", `/threads/${threadId("th-none")}/state`)).json()).state, null);

    const renamed = await call(handler, "PATCH", `/threads/${thread}`, { agentId: "default", name: "Plan" });
    assert.equal(renamed.status, 200);
    assert.equal((await renamed.json()).name, "Plan");
    const archived = await call(handler, "POST", `/threads/${thread}/archive`, { agentId: "default" });
    assert.deepEqual(await archived.json(), { threadId: thread, archived: true });
    assert.ok(!(await (await call(handler, "GET", "/threads?agentId=default")).json()).threads.some((t) => t.id === thread));
    const withArchived = await (await call(handler, "GET", "/threads?agentId=default&includeArchived=true")).json();
    assert.equal(withArchived.threads.find((t) => t.id === thread)?.name, "Plan");

    // clear is off unless asked for: nothing is deleted.
    assert.equal((await call(handler, "POST", "/threads/clear")).status, 204);
    assert.notEqual((await hub.thread(thread)).epoch, null);

    const deleted = await call(handler, "DELETE", `/threads/${thread}`, { agentId: "default" });
    assert.deepEqual(await deleted.json(), { threadId: thread, deleted: true });
    assert.equal((await hub.thread(thread)).epoch, null);
    assert.equal((await call(handler, "DELETE", `/threads/${thread}`, { agentId: "default" })).status, 404);
    assert.equal((await call(handler, "GET", "/threads/not%20an%20id/state")).status, 400);
  });

  test("threadHooks({ clear: true }) serves POST /threads/clear by deleting that agent's threads", async () => {
    const clearing = new AguiHubRunner({ url: hub.http, WebSocket });
    const h = createCopilotRuntimeHandler({
      runtime: new CopilotRuntime({ agents: { default: new StreamingAgent() }, runner: clearing }),
      basePath: "/api",
      hooks: clearing.threadHooks({ clear: true }),
    });
    const [mine, theirs] = [threadId("th-clear"), threadId("th-keep")];
    await runOn(clearing, mine, "default").done;
    await runOn(clearing, theirs, "other").done;
    assert.equal((await call(h, "POST", "/threads/clear?agentId=default")).status, 204);
    assert.equal((await hub.thread(mine)).epoch, null);
    assert.notEqual((await hub.thread(theirs)).epoch, null);
  });
});
