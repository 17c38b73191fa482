// RunFramer wraps what the hub sends outside any run into synthetic runs, so that the official
// AG-UI client (@ag-ui/client, its real runAgent pipeline) accepts every stream.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { AbstractAgent } from "@ag-ui/client";
import { Observable } from "rxjs";

import { RunFramer, withoutHubMetadata } from "../src/agent.js";

process.env.SUPPRESS_TRANSFORMATION_WARNINGS = "";

class Replay extends AbstractAgent {
  constructor(events) {
    super({ threadId: "t" });
    this.events = events;
  }

  run() {
    return new Observable((subscriber) => {
      for (const event of this.events) subscriber.next(structuredClone(event));
      subscriber.complete();
    });
  }
}

/** Run framed events through the official client; what it holds, and what it warned. */
async function official(events) {
  const warnings = [];
  const { warn, error } = console;
  console.warn = console.error = (...args) => warnings.push(args.join(" "));
  try {
    const agent = new Replay(events);
    await agent.runAgent({ runId: "watch" });
    return { state: agent.state, messages: agent.messages, warnings };
  } finally {
    Object.assign(console, { warn, error });
  }
}

function frame(events, until = "abort") {
  const framer = new RunFramer({ threadId: "t", runId: "watch", until });
  const out = events.flatMap((e) => framer.push(e));
  return [...out, ...framer.finish()];
}

const sync = (event) => ({ ...event, metadata: { hub: { seq: 3, epoch: "e", sync: true } } });
const types = (events) =>
  events.map((e) =>
    e.type === "RUN_STARTED" || e.type === "RUN_FINISHED" ? `${e.type}:${e.runId}` : e.type,
  );

describe("RunFramer", () => {
  test("an idle thread's join prefix is wrapped in one synthetic run", async () => {
    const out = frame([
      sync({ type: "STATE_SNAPSHOT", snapshot: { doc: 1 } }),
      sync({ type: "MESSAGES_SNAPSHOT", messages: [{ id: "u", role: "user", content: "hi" }] }),
    ]);
    assert.deepEqual(types(out), [
      "RUN_STARTED:watch",
      "STATE_SNAPSHOT",
      "MESSAGES_SNAPSHOT",
      "RUN_FINISHED:watch",
    ]);
    assert.ok(
      out.every((e) => e.metadata === undefined),
      "the hub's positions are not forwarded",
    );
    const got = await official(out);
    assert.deepEqual(got.state, { doc: 1 });
    assert.deepEqual(got.messages, [{ id: "u", role: "user", content: "hi" }]);
    assert.deepEqual(got.warnings, []);
  });

  test("a join inside a run is forwarded as is", () => {
    const out = frame([
      sync({ type: "RUN_STARTED", threadId: "t", runId: "r1" }),
      sync({ type: "STATE_SNAPSHOT", snapshot: {} }),
      { type: "RUN_FINISHED", threadId: "t", runId: "r1" },
    ]);
    assert.deepEqual(types(out), ["RUN_STARTED:r1", "STATE_SNAPSHOT", "RUN_FINISHED:r1"]);
  });

  test("runs, edits between runs and items open outside runs become a stream the client accepts", async () => {
    const out = frame([
      { type: "STATE_SNAPSHOT", snapshot: { n: 0 } },
      { type: "TEXT_MESSAGE_START", messageId: "m0", role: "assistant" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m0", delta: "outside" },
      { type: "STEP_STARTED", stepName: "s" },
      { type: "RUN_STARTED", threadId: "t", runId: "r1" }, // closes the synthetic run first
      { type: "STATE_DELTA", delta: [{ op: "replace", path: "/n", value: 1 }] },
      { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "inside" },
      { type: "TEXT_MESSAGE_END", messageId: "m1" },
      { type: "RUN_STARTED", threadId: "t", runId: "r1" }, // a repeat (a repair) is dropped
      { type: "RUN_FINISHED", threadId: "t", runId: "r1" },
      { type: "STATE_DELTA", delta: [{ op: "replace", path: "/n", value: 2 }] }, // between runs
      { type: "RUN_ERROR", message: "boom" },
      { type: "RUN_FINISHED", threadId: "t", runId: "gone" }, // nothing open: dropped
      { type: "CUSTOM", name: "note", value: 1 },
    ]);
    assert.deepEqual(types(out), [
      "RUN_STARTED:watch",
      "STATE_SNAPSHOT",
      "TEXT_MESSAGE_START",
      "TEXT_MESSAGE_CONTENT",
      "STEP_STARTED",
      "STEP_FINISHED",
      "TEXT_MESSAGE_END",
      "RUN_FINISHED:watch",
      "RUN_STARTED:r1",
      "STATE_DELTA",
      "TEXT_MESSAGE_START",
      "TEXT_MESSAGE_CONTENT",
      "TEXT_MESSAGE_END",
      "RUN_FINISHED:r1",
      "RUN_STARTED:watch-1",
      "STATE_DELTA",
      "RUN_ERROR",
      "RUN_STARTED:watch-2",
      "CUSTOM",
      "RUN_FINISHED:watch-2",
    ]);
    const got = await official(out);
    assert.deepEqual(got.state, { n: 2 });
    assert.deepEqual(
      got.messages.map((m) => [m.id, m.content]),
      [
        ["m0", "outside"],
        ["m1", "inside"],
      ],
    );
  });

  test("a subagent open when the framer cuts a run is finished first; SUBAGENT_ERROR ends one", async () => {
    const started = (id, parent) => ({
      type: "SUBAGENT_STARTED",
      subagentRunId: id,
      name: "researcher",
      ...(parent ? { parentSubagentRunId: parent } : {}),
    });
    const framer = new RunFramer({ threadId: "t", runId: "watch", until: "abort" });
    const out = [
      { type: "RUN_STARTED", threadId: "t", runId: "r1" },
      started("sa1"),
      started("sa2", "sa1"),
      { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant", subagentRunId: "sa2" },
    ].flatMap((e) => framer.push(e));
    // A reconnect the hub could not replay: the join that follows re-opens what is open.
    out.push(...framer.interrupt());
    out.push(
      ...[
        { type: "RUN_STARTED", threadId: "t", runId: "r1" },
        started("sa1"),
        { type: "SUBAGENT_ERROR", subagentRunId: "sa1", message: "boom" },
        started("sa3"),
        { type: "RUN_STARTED", threadId: "t", runId: "r2" }, // r1's end was lost: cut here
        { type: "RUN_FINISHED", threadId: "t", runId: "r2" },
      ].flatMap((e) => framer.push(e)),
    );
    assert.deepEqual(types(out).slice(4, 8), [
      "TEXT_MESSAGE_END",
      "SUBAGENT_FINISHED",
      "SUBAGENT_FINISHED",
      "RUN_FINISHED:r1",
    ]);
    assert.deepEqual(
      out.filter((e) => e.type === "SUBAGENT_FINISHED").map((e) => e.subagentRunId),
      ["sa2", "sa1", "sa3"],
    );
    const got = await official(out); // verifyEvents refuses a run that ends with a subagent open
    assert.deepEqual(
      got.warnings.filter((w) => /subagent/i.test(w)),
      [],
    );
  });

  test("until run-end stops after the first real run ends; idle and abort leave that to the caller", () => {
    const events = [
      { type: "STATE_SNAPSHOT", snapshot: {} },
      { type: "RUN_STARTED", threadId: "t", runId: "r1" },
      { type: "RUN_FINISHED", threadId: "t", runId: "r1" },
    ];
    for (const [until, done] of [
      ["run-end", true],
      ["idle", false],
      ["abort", false],
    ]) {
      const framer = new RunFramer({ threadId: "t", until });
      events.forEach((e) => framer.push(e));
      assert.equal(framer.done, done, until);
      assert.equal(framer.runsEnded, 1);
    }
  });

  test("only the hub's own metadata is removed", () => {
    assert.deepEqual(withoutHubMetadata({ type: "X", metadata: { hub: { seq: 1 }, edit: "e" } }), {
      type: "X",
      metadata: { edit: "e" },
    });
    const plain = { type: "X" };
    assert.equal(withoutHubMetadata(plain), plain);
  });
});
