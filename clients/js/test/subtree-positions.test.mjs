// A subtree's consumer (?path=) is sent nothing for events that leave its subtree alone: the
// next frame carries metadata.hub.prev, the seq of the frame before it in its stream. The Mirror
// takes such a frame when it holds prev, and sees a gap when it does not.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Mirror } from "../src/agui-hub.js";

const EPOCH = "e1";
const at = (seq, event, extra = {}) => ({ ...event, metadata: { hub: { seq, epoch: EPOCH, ...extra } } });
const delta = (...ops) => ({ type: "STATE_DELTA", delta: ops });
const resyncs = (step) => step.send.filter((c) => c.type === "hub.resync").map((c) => c.reason);

function joined(state, seq) {
  const mirror = new Mirror();
  mirror.receive({ type: "CUSTOM", name: "hub.welcome", value: { seq, epoch: EPOCH } });
  mirror.receive(at(seq, { type: "STATE_SNAPSHOT", snapshot: state }, { sync: true }));
  mirror.receive(at(seq, { type: "MESSAGES_SNAPSHOT", messages: [] }, { sync: true }));
  return mirror;
}

test("a frame whose prev the copy holds is next, though seq jumped", () => {
  const mirror = joined({ x: 1 }, 3);
  const step = mirror.receive(at(9, delta({ op: "replace", path: "/x", value: 2 }), { prev: 3 }));
  assert.notEqual(step.applied, null);
  assert.deepEqual(resyncs(step), []);
  assert.deepEqual([mirror.seq, mirror.state], [9, { x: 2 }]);
  // prev below the position (the copy joined after that frame) is no gap either.
  const later = mirror.receive(at(12, delta({ op: "add", path: "/y", value: 0 }), { prev: 7 }));
  assert.notEqual(later.applied, null);
  assert.deepEqual([mirror.seq, mirror.state], [12, { x: 2, y: 0 }]);
});

test("a frame whose prev the copy does not hold is a gap: a frame of its stream was lost", () => {
  const mirror = joined({ x: 1 }, 3);
  const step = mirror.receive(at(9, delta({ op: "replace", path: "/x", value: 2 }), { prev: 5 }));
  assert.equal(step.applied, null);
  assert.deepEqual(resyncs(step), ["gap"]);
  assert.deepEqual(mirror.state, { x: 1 });
});

test("a heartbeat at the stream's position is no gap; one ahead of it is", () => {
  const mirror = joined({ x: 1 }, 3);
  const quiet = mirror.receive({ type: "CUSTOM", name: "hub.heartbeat", value: { seq: 3, epoch: EPOCH } });
  assert.deepEqual(resyncs(quiet), []);
  const ahead = mirror.receive({ type: "CUSTOM", name: "hub.heartbeat", value: { seq: 4, epoch: EPOCH } });
  assert.deepEqual(resyncs(ahead), ["gap"]);
});
