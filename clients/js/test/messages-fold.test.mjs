// The JS port of the hub's fold (src/messages.js) finds a tool call as @ag-ui/client 1.0 does
// (issue 20, 3): a call id several messages hold is the first holder's, and the next holder's
// once the first loses its calls (tests/core/test_fold_official_shapes.py for the hub's).

import assert from "node:assert/strict";
import { test } from "node:test";

import { MessageLog, fold } from "../src/messages.js";

const call = (id) => ({ id, type: "function", function: { name: "f", arguments: "" } });
const snapshot = {
  type: "MESSAGES_SNAPSHOT",
  messages: [
    { id: "a1", role: "assistant", toolCalls: [call("c1")] },
    { id: "u1", role: "user", content: "between" },
    { id: "a2", role: "assistant", toolCalls: [call("c1")] },
    { id: "u2", role: "user", content: "after" },
  ],
};
const result = { type: "TOOL_CALL_RESULT", messageId: "res", toolCallId: "c1", content: "ok" };

test("a call id held by two messages is the first one's", () => {
  const log = new MessageLog();
  fold(log, snapshot);
  fold(log, result);
  const encrypted = { subtype: "tool-call", entityId: "c1", encryptedValue: "E" };
  fold(log, { type: "REASONING_ENCRYPTED_VALUE", ...encrypted });
  fold(log, { type: "TOOL_CALL_ARGS", toolCallId: "c1", delta: "{}" });
  assert.deepEqual(log.items.map((m) => m.id), ["a1", "res", "u1", "a2", "u2"]);
  const first = { ...call("c1"), function: { name: "f", arguments: "{}" }, encryptedValue: "E" };
  assert.deepEqual(log.items[0].toolCalls[0], first);
  assert.deepEqual(log.items[3].toolCalls, [call("c1")]);
});

test("a call id goes to the next holder once the first loses its calls", () => {
  const log = new MessageLog();
  fold(log, snapshot);
  fold(log, { type: "ACTIVITY_SNAPSHOT", messageId: "a1", activityType: "plan", content: {} });
  fold(log, result);
  assert.deepEqual(log.items.map((m) => m.id), ["a1", "u1", "a2", "res", "u2"]);
});
