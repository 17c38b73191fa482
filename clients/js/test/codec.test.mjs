// The msgpack path: the same bytes as the hub's Python msgpack, and frames of both encodings.

import assert from "node:assert/strict";
import { test } from "node:test";

import { decodeFrame, encodeFrame, FrameError, loadMsgpack } from "../src/agui-hub.js";

// msgpack.packb(EVENT, use_bin_type=True).hex() in the hub's Python (hub/wire/codec.py).
const EVENT = {
  type: "STATE_DELTA",
  delta: [{ op: "add", path: "/a", value: [1, -1, 1.5, "é", null, true, { k: 300 }] }],
  metadata: { hub: { seq: 70000, epoch: "e1" } },
};
const PYTHON_BYTES =
  "83a474797065ab53544154455f44454c5441a5" +
  "64656c74619183a26f70a3616464a470617468a22f61a576616c75659701ffcb3ff8000000000000a2c3a9c0c381a16bcd012c" +
  "a86d6574616461746181a3687562" +
  "82a3736571ce00011170a565706f6368a26531";

test("encodes an event to exactly the bytes the hub's Python msgpack makes", async () => {
  const msgpack = await loadMsgpack();
  const bytes = encodeFrame(EVENT, "msgpack", msgpack);
  assert.ok(bytes instanceof Uint8Array);
  assert.equal(Buffer.from(bytes).toString("hex"), PYTHON_BYTES);
});

test("decodes binary frames as msgpack, whatever binary type the socket hands over", async () => {
  const msgpack = await loadMsgpack();
  const bytes = Buffer.from(PYTHON_BYTES, "hex");
  const arrayBuffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  for (const data of [bytes, new Uint8Array(bytes), arrayBuffer, [bytes.subarray(0, 5), bytes.subarray(5)]]) {
    assert.deepEqual(decodeFrame(data, msgpack), EVENT);
  }
});

test("decodes text frames as JSON", () => {
  assert.deepEqual(decodeFrame(JSON.stringify(EVENT)), EVENT);
  assert.equal(encodeFrame({ a: 1 }, "json"), '{"a":1}');
});

test("refuses what is not one object", async () => {
  const msgpack = await loadMsgpack();
  for (const data of ["[1]", "nope", "NaN", "null", '"x"']) {
    assert.throws(() => decodeFrame(data, msgpack), FrameError, data);
  }
  assert.throws(() => decodeFrame(new Uint8Array([0xc1]), msgpack), FrameError);
  assert.throws(() => decodeFrame(msgpack.encode([1, 2]), msgpack), FrameError);
  assert.throws(() => decodeFrame(new Uint8Array([0x80])), FrameError, "msgpack not loaded");
});
