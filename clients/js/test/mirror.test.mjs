// The sans-I/O Mirror follows the hub's consumer contract, frame by frame.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";

import { Mirror } from "../src/agui-hub.js";
import { ROOT } from "../test-support/hub.mjs";

const EPOCH = "e1";

const at = (seq, event, { sync = false, epoch = EPOCH } = {}) => ({
  ...event,
  metadata: { hub: sync ? { seq, epoch, sync: true } : { seq, epoch } },
});
const welcome = (seq, epoch = EPOCH, extra = {}) => ({
  type: "CUSTOM",
  name: "hub.welcome",
  value: { seq, epoch, ...extra },
});
const snapshot = (seq, state, messages = []) => [
  at(seq, { type: "STATE_SNAPSHOT", snapshot: state }, { sync: true }),
  at(seq, { type: "MESSAGES_SNAPSHOT", messages }, { sync: true }),
];
const delta = (...ops) => ({ type: "STATE_DELTA", delta: ops });
const resyncs = (step) => step.send.filter((c) => c.type === "hub.resync").map((c) => c.reason);

function joined(state, seq = 0, messages = []) {
  const mirror = new Mirror();
  mirror.receive(welcome(seq));
  for (const frame of snapshot(seq, state, messages)) mirror.receive(frame);
  return mirror;
}

describe("positions", () => {
  test("a fresh copy waits for the join snapshot", () => {
    const mirror = new Mirror();
    assert.deepEqual(mirror.resumePosition(), [null, null]);
    assert.equal(mirror.receive(at(1, delta({ op: "add", path: "/a", value: 1 }))).applied, null);
    for (const frame of snapshot(1, { a: 1 })) assert.equal(mirror.receive(frame).applied, frame);
    assert.deepEqual([mirror.seq, mirror.epoch, mirror.state], [1, EPOCH, { a: 1 }]);
    assert.deepEqual(mirror.resumePosition(), [1, EPOCH]);
    assert.equal(mirror.awaiting, null);
    assert.equal(mirror.snapshots, 1);
  });

  test("the next event is applied and a duplicate is ignored", () => {
    const mirror = joined({ n: 0 });
    const step = mirror.receive(at(1, delta({ op: "replace", path: "/n", value: 1 })));
    assert.notEqual(step.applied, null);
    assert.deepEqual(step.send, []);
    assert.deepEqual(mirror.receive(at(1, delta({ op: "replace", path: "/n", value: 99 }))).send, []);
    assert.deepEqual([mirror.seq, mirror.state, mirror.duplicates], [1, { n: 1 }, 1]);
  });

  test("a gap asks for a resync and ignores live events until the snapshot", () => {
    const mirror = joined({ n: 0 });
    const step = mirror.receive(at(2, delta({ op: "replace", path: "/n", value: 2 })));
    assert.deepEqual(resyncs(step), ["gap"]);
    assert.deepEqual(step.send[0].holding, { run: null, open: [] });
    assert.deepEqual(mirror.receive(at(3, delta({ op: "replace", path: "/n", value: 3 }))).send, []);
    assert.deepEqual(mirror.state, { n: 0 });
    assert.deepEqual(mirror.resumePosition(), [null, null]);
    for (const frame of snapshot(3, { n: 3 })) mirror.receive(frame);
    assert.notEqual(mirror.receive(at(4, delta({ op: "replace", path: "/n", value: 4 }))).applied, null);
    assert.deepEqual([mirror.seq, mirror.state, mirror.resyncs], [4, { n: 4 }, { gap: 1 }]);
  });

  test("an event from another epoch is a gap", () => {
    const mirror = joined({});
    const step = mirror.receive(at(1, delta({ op: "add", path: "/a", value: 1 }), { epoch: "other" }));
    assert.deepEqual(resyncs(step), ["gap"]);
  });

  test("a heartbeat ahead of the copy means it lost the tail: a gap", () => {
    const mirror = joined({ n: 0 });
    const beat = (seq) => ({ type: "CUSTOM", name: "hub.heartbeat", value: { seq, epoch: EPOCH } });
    assert.deepEqual(mirror.receive(beat(0)).send, []);
    assert.deepEqual(resyncs(mirror.receive(beat(2))), ["gap"]);
  });

  test("a welcome from another epoch waits for the hub's snapshot without asking", () => {
    const mirror = new Mirror({ state: { old: true }, since: 5, epoch: EPOCH });
    assert.deepEqual(mirror.resumePosition(), [5, EPOCH]);
    mirror.connected(true);
    const step = mirror.receive(welcome(2, "new", { resumed: false }));
    assert.deepEqual(step.send, []);
    assert.notEqual(step.welcome, null);
    assert.equal(mirror.receive(at(6, delta({ op: "add", path: "/x", value: 1 }))).applied, null);
    for (const frame of snapshot(2, { fresh: true })) mirror.receive(frame);
    assert.deepEqual([mirror.seq, mirror.state], [2, { fresh: true }]);
  });

  test("hub errors are reported, not applied", () => {
    const mirror = joined({});
    const value = { code: "conflict", message: "edit rejected" };
    const step = mirror.receive({ type: "CUSTOM", name: "hub.error", value });
    assert.deepEqual(step.error, value);
    assert.equal(step.applied, null);
  });

  test("drop_next loses exactly that many live events", () => {
    const mirror = joined({ n: 0 });
    mirror.dropNext(1);
    assert.deepEqual(mirror.receive(at(1, delta({ op: "replace", path: "/n", value: 1 }))).send, []);
    assert.deepEqual(resyncs(mirror.receive(at(2, delta({ op: "replace", path: "/n", value: 2 })))), ["gap"]);
    assert.equal(mirror.dropped, 1);
  });
});

describe("failed patches", () => {
  test("a delta that fails leaves the copy untouched and asks for a resync", () => {
    const mirror = joined({ n: 0, list: [1] });
    const list = mirror.state.list;
    const step = mirror.receive(
      at(1, delta({ op: "add", path: "/list/-", value: 2 }, { op: "remove", path: "/missing" })),
    );
    assert.equal(step.applied, null);
    assert.deepEqual(resyncs(step), ["patch_failed"]);
    assert.deepEqual(mirror.state, { n: 0, list: [1] });
    assert.equal(mirror.state.list, list, "rolled back in place, not replaced");
    assert.equal(mirror.seq, 0);
  });

  test("content for a message it does not hold means its copy is wrong", () => {
    const mirror = joined({});
    const step = mirror.receive(at(1, { type: "TEXT_MESSAGE_CONTENT", messageId: "nope", delta: "x" }));
    assert.deepEqual(resyncs(step), ["patch_failed"]);
    const next = mirror.receive(at(2, { type: "TOOL_CALL_ARGS", toolCallId: "nope", delta: "{}" }));
    assert.deepEqual(next.send, [], "already waiting for the snapshot");
  });

  test("a corrupted copy finds out at the next delta that touches it, and is repaired", () => {
    const mirror = joined({ doc: { n: 0 } });
    mirror.corrupt("/doc", "broken");
    const step = mirror.receive(at(1, delta({ op: "replace", path: "/doc/n", value: 1 })));
    assert.deepEqual(resyncs(step), ["patch_failed"]);
    for (const frame of snapshot(1, { doc: { n: 1 } })) mirror.receive(frame);
    assert.deepEqual([mirror.seq, mirror.state, mirror.awaiting], [1, { doc: { n: 1 } }, null]);
  });

  test("corrupt sets a value and refuses a path without a parent", () => {
    const mirror = joined({ doc: { n: 0 }, list: [1, 2] });
    mirror.corrupt("/doc/n", "broken");
    mirror.corrupt("/doc/new", 1);
    mirror.corrupt("/list/0", 9);
    assert.deepEqual(mirror.state, { doc: { n: "broken", new: 1 }, list: [9, 2] });
    assert.throws(() => mirror.corrupt("/missing/deep", 1));
    assert.throws(() => mirror.corrupt("no-slash", 1));
  });
});

describe("snapshots", () => {
  test("a snapshot the copy did not ask for (conflation) replaces the state and moves on", () => {
    const mirror = joined({ n: 0 });
    mirror.receive(at(1, delta({ op: "replace", path: "/n", value: 1 })));
    // The hub dropped this consumer's backlog (seq 2..40) and sends one snapshot instead.
    for (const frame of snapshot(40, { n: 40, more: true }))
      assert.notEqual(mirror.receive(frame).applied, null);
    assert.deepEqual([mirror.seq, mirror.state, mirror.resyncs], [40, { n: 40, more: true }, {}]);
    assert.notEqual(mirror.receive(at(41, delta({ op: "replace", path: "/n", value: 41 }))).applied, null);
    assert.equal(mirror.seq, 41);
    assert.equal(mirror.snapshots, 2);
  });

  test("a repair is partial until the MESSAGES_SNAPSHOT that follows its STATE_SNAPSHOT", () => {
    const mirror = new Mirror();
    mirror.receive(welcome(1));
    const [state, messages] = snapshot(1, { a: 1 }, [{ id: "u", role: "user", content: "q" }]);
    mirror.receive(state);
    assert.deepEqual([mirror.awaiting, mirror.partial], [null, true]);
    mirror.receive(messages);
    assert.equal(mirror.partial, false);
    mirror.receive(state); // a hub that ever sends a snapshot alone does not leave it partial
    mirror.receive(at(2, delta({ op: "replace", path: "/a", value: 2 })));
    assert.equal(mirror.partial, false);
  });

  test("MESSAGES_SNAPSHOT replaces known ids in place, appends new ones, drops the rest", () => {
    const held = [
      { id: "a", role: "user", content: "1" },
      { id: "r", role: "reasoning", content: "thinking" },
      { id: "b", role: "assistant", content: "2" },
      { id: "act", role: "activity", activityType: "p", content: {} },
      { id: "c", role: "assistant", content: "3" },
    ];
    const mirror = joined({}, 0, held);
    const step = mirror.receive(
      at(1, {
        type: "MESSAGES_SNAPSHOT",
        messages: [
          { id: "new1", role: "user", content: "n1" },
          { id: "b", role: "assistant", content: "2 edited" },
          { id: "new2", role: "assistant", content: "n2" },
        ],
      }),
    );
    assert.notEqual(step.applied, null);
    assert.deepEqual(
      mirror.messages.items.map((m) => [m.id, m.content]),
      [
        ["r", "thinking"], // reasoning and activity survive a snapshot that has none of them
        ["b", "2 edited"], // replaced in place
        ["act", {}],
        ["new1", "n1"], // unknown ones appended in snapshot order
        ["new2", "n2"],
      ],
    );
    // A snapshot that carries a reasoning message is the complete set of reasoning messages.
    mirror.receive(
      at(2, { type: "MESSAGES_SNAPSHOT", messages: [{ id: "r2", role: "reasoning", content: "" }] }),
    );
    assert.deepEqual(
      mirror.messages.items.map((m) => m.id),
      ["act", "r2"],
    );
  });

  test("a snapshot drops a message still streaming, and what streams into it goes nowhere", () => {
    // As the official client and the hub's thread do (no resync: the copy is right).
    const mirror = joined({});
    mirror.receive(at(1, { type: "RUN_STARTED", threadId: "t", runId: "r" }));
    mirror.receive(at(2, { type: "TEXT_MESSAGE_START", messageId: "m", role: "assistant" }));
    mirror.receive(at(3, { type: "TEXT_MESSAGE_CONTENT", messageId: "m", delta: "Hel" }));
    mirror.receive(at(4, { type: "MESSAGES_SNAPSHOT", messages: [{ id: "u", role: "user", content: "q" }] }));
    const step = mirror.receive(at(5, { type: "TEXT_MESSAGE_CONTENT", messageId: "m", delta: "lo" }));
    assert.deepEqual(step.send, []);
    assert.deepEqual(mirror.messages.items, [{ id: "u", role: "user", content: "q" }]);
  });
});

describe("streaming", () => {
  test("text, tool calls, results and activities build the messages", () => {
    const mirror = joined({});
    const events = [
      { type: "RUN_STARTED", threadId: "t", runId: "r1" },
      { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "Hel" },
      { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "lo" },
      { type: "TOOL_CALL_START", toolCallId: "c1", toolCallName: "search", parentMessageId: "m1" },
      { type: "TOOL_CALL_ARGS", toolCallId: "c1", delta: '{"q":' },
      { type: "TOOL_CALL_ARGS", toolCallId: "c1", delta: '"x"}' },
      { type: "TOOL_CALL_END", toolCallId: "c1" },
      { type: "TEXT_MESSAGE_END", messageId: "m1" },
      { type: "TOOL_CALL_RESULT", messageId: "t1", toolCallId: "c1", content: "found" },
      { type: "ACTIVITY_SNAPSHOT", messageId: "a", activityType: "plan", content: { steps: [] } },
      {
        type: "ACTIVITY_DELTA",
        messageId: "a",
        activityType: "plan",
        patch: [{ op: "add", path: "/steps/-", value: "s" }],
      },
      { type: "TEXT_MESSAGE_CHUNK", messageId: "m2", delta: "one " },
      { type: "TEXT_MESSAGE_CHUNK", delta: "two" },
      { type: "RUN_FINISHED", threadId: "t", runId: "r1" },
    ];
    events.forEach((event, i) => {
      const step = mirror.receive(at(i + 1, event));
      assert.notEqual(step.applied, null, event.type);
      assert.deepEqual(step.send, []);
    });
    assert.deepEqual(mirror.messages.items, [
      {
        id: "m1",
        role: "assistant",
        content: "Hello",
        toolCalls: [{ id: "c1", type: "function", function: { name: "search", arguments: '{"q":"x"}' } }],
      },
      { id: "t1", role: "tool", toolCallId: "c1", content: "found" },
      { id: "a", role: "activity", activityType: "plan", content: { steps: ["s"] } },
      { id: "m2", role: "assistant", content: "one two" },
    ]);
    assert.equal(mirror.runId, null);
    assert.equal(mirror.open.size, 0);
  });

  test("a resync says what the copy holds open", () => {
    const mirror = joined({});
    mirror.receive(at(1, { type: "RUN_STARTED", threadId: "t", runId: "r1" }));
    mirror.receive(at(2, { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" }));
    mirror.receive(at(3, { type: "TOOL_CALL_START", toolCallId: "c1", toolCallName: "f" }));
    const step = mirror.receive(at(5, { type: "TOOL_CALL_ARGS", toolCallId: "c1", delta: "{}" }));
    assert.deepEqual(step.send, [
      { type: "hub.resync", reason: "gap", holding: { run: "r1", open: ["text:m1", "tool:c1"] } },
    ]);
  });

  test("an item re-opened as a chunk is continued by the next chunks", () => {
    const mirror = new Mirror();
    mirror.receive(welcome(2));
    for (const frame of [
      at(2, { type: "RUN_STARTED", threadId: "t", runId: "r1" }, { sync: true }),
      ...snapshot(2, {}),
      at(2, { type: "TEXT_MESSAGE_CHUNK", messageId: "m", delta: "one " }, { sync: true }),
    ]) {
      assert.notEqual(mirror.receive(frame).applied, null);
    }
    assert.notEqual(mirror.receive(at(3, { type: "TEXT_MESSAGE_CHUNK", delta: "two" })).applied, null);
    assert.notEqual(
      mirror.receive(at(4, { type: "TEXT_MESSAGE_CHUNK", messageId: "m", delta: "three" })).applied,
      null,
    );
    assert.deepEqual(mirror.messages.items, [{ id: "m", role: "assistant", content: "one twothree" }]);
  });

  test("each agent's chunks stream in its own lane, as the official client keeps them", () => {
    const mirror = joined({});
    const events = [
      { type: "RUN_STARTED", threadId: "t", runId: "r1" },
      { type: "TEXT_MESSAGE_CHUNK", messageId: "m1", delta: "p1 " },
      { type: "TEXT_MESSAGE_CHUNK", messageId: "m2", subagentRunId: "s1", delta: "s1 " },
      { type: "TOOL_CALL_CHUNK", toolCallId: "c1", toolCallName: "f", subagentRunId: "s2", delta: "{" },
      { type: "TEXT_MESSAGE_CHUNK", delta: "p2 " }, // the parent's lane
      { type: "TEXT_MESSAGE_CHUNK", subagentRunId: "s1", delta: "s2 " }, // s1's lane
      { type: "TEXT_MESSAGE_CHUNK", messageId: "m2", delta: "s3 " }, // s1's lane, by its id
      { type: "TOOL_CALL_CHUNK", delta: "}" }, // the only tool lane: s2's
      { type: "STATE_DELTA", delta: [] }, // the parent's lane ends
      { type: "TEXT_MESSAGE_CHUNK", delta: "s4" }, // the only text lane left: s1's
      { type: "SUBAGENT_FINISHED", subagentRunId: "s2" }, // s2's lane ends
    ];
    events.forEach((event, i) => {
      const step = mirror.receive(at(i + 1, event));
      assert.notEqual(step.applied, null, `${i}: ${event.type}`);
      assert.deepEqual(step.send, [], `${i}: ${event.type}`);
    });
    assert.deepEqual([...mirror.lanes], [["s1", "text:m2"]]);
    assert.deepEqual([...mirror.open], ["text:m2"]);
    assert.deepEqual(mirror.messages.items, [
      { id: "m1", role: "assistant", content: "p1 p2 " },
      { id: "m2", role: "assistant", content: "s1 s2 s3 s4", subagentRunId: "s1" },
      {
        id: "c1",
        role: "assistant",
        toolCalls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }],
        subagentRunId: "s2",
      },
    ]);
    // a subagent's id-less chunk with no lane of its own continues nothing: the copy asks
    const refused = mirror.receive(at(12, { type: "TEXT_MESSAGE_CHUNK", subagentRunId: "s9", delta: "x" }));
    assert.deepEqual(resyncs(refused), ["patch_failed"]);
  });

  test("a repair re-opens every lane with a chunk, and live chunks continue each", () => {
    const mirror = joined({});
    mirror.receive(at(1, { type: "RUN_STARTED", threadId: "t", runId: "r1" }));
    mirror.receive(at(2, { type: "TEXT_MESSAGE_CHUNK", messageId: "old", delta: "x" }));
    mirror.dropNext(1);
    mirror.receive(at(3, { type: "STATE_DELTA", delta: [] }));
    assert.deepEqual(resyncs(mirror.receive(at(5, { type: "STATE_DELTA", delta: [] }))), ["gap"]);
    const messages = [
      { id: "old", role: "assistant", content: "x" },
      { id: "m1", role: "assistant", content: "" },
      { id: "m2", role: "assistant", content: "", subagentRunId: "s1" },
    ];
    for (const frame of [
      at(5, { type: "STATE_SNAPSHOT", snapshot: {} }, { sync: true }),
      at(5, { type: "MESSAGES_SNAPSHOT", messages }, { sync: true }),
      at(5, { type: "TEXT_MESSAGE_CHUNK", messageId: "m1", role: "assistant", delta: "a" }, { sync: true }),
      at(
        5,
        { type: "TEXT_MESSAGE_CHUNK", messageId: "m2", role: "assistant", subagentRunId: "s1", delta: "b" },
        { sync: true },
      ),
    ]) {
      assert.notEqual(mirror.receive(frame).applied, null, frame.type);
    }
    assert.deepEqual([...mirror.lanes], [[null, "text:m1"], ["s1", "text:m2"]]);
    assert.deepEqual([...mirror.open], ["text:m1", "text:m2"]);
    mirror.receive(at(6, { type: "TEXT_MESSAGE_CHUNK", subagentRunId: "s1", delta: "c" }));
    mirror.receive(at(7, { type: "TEXT_MESSAGE_CHUNK", delta: "d" }));
    assert.deepEqual(
      mirror.messages.items.map((m) => m.content),
      ["x", "ad", "bc"],
    );
  });
});

// -- the same machine as the hub's core and the Python client -----------------------------------

const PYTHON = join(ROOT, ".venv", "bin", "python");
const oracleMissing =
  process.env.CI !== "true" && !existsSync(PYTHON) ? `no Python venv at ${PYTHON}` : false;

function oracle() {
  const script = join(ROOT, "clients", "js", "test-support", "oracle.py");
  const out = execFileSync(PYTHON, [script, "60"], { cwd: ROOT, maxBuffer: 64 << 20 });
  return JSON.parse(out.toString());
}

describe("against the hub's own core", { skip: oracleMissing }, () => {
  const data = oracleMissing ? { joins: [], scenarios: [] } : oracle();

  test("a copy that joins anywhere in a run ends with the thread's state and messages", () => {
    assert.equal(data.joins.length, 27);
    for (const { cut, frames, end } of data.joins) {
      const mirror = new Mirror();
      mirror.connected(false);
      for (const frame of frames) {
        assert.deepEqual(mirror.receive(frame).send, [], `cut ${cut}: ${frame.type}`);
      }
      assert.equal(mirror.seq, end.seq, `cut ${cut}`);
      assert.deepEqual(mirror.state, end.state, `cut ${cut}`);
      assert.deepEqual(mirror.messages.items, end.messages, `cut ${cut}`);
    }
  });

  test("random streams with lost, late and duplicated frames: step for step as the Python Mirror", () => {
    let converged = 0;
    let resyncsAsked = 0;
    for (const { seed, steps, end, resyncs: expected, converged: ok } of data.scenarios) {
      const mirror = new Mirror();
      mirror.connected(false);
      steps.forEach((s, i) => {
        if (s.corrupt) {
          mirror.corrupt(...s.corrupt);
          return;
        }
        const step = mirror.receive(s.frame);
        const where = `seed ${seed} step ${i} (${s.frame.type} ${s.frame.name ?? ""})`;
        assert.equal(step.applied !== null, s.applied, where);
        assert.deepEqual(step.send, s.send, where);
      });
      assert.equal(mirror.seq, end.seq, `seed ${seed}`);
      assert.deepEqual(mirror.state, end.state, `seed ${seed}`);
      assert.deepEqual(mirror.messages.items, end.messages, `seed ${seed}`);
      assert.deepEqual(mirror.resyncs, expected, `seed ${seed}`);
      converged += ok ? 1 : 0;
      resyncsAsked += Object.values(expected).reduce((a, b) => a + b, 0);
    }
    assert.ok(converged > data.scenarios.length / 2, "most scenarios end with the hub's copy");
    assert.ok(resyncsAsked > 50, "the scenarios exercise repairs");
  });
});
