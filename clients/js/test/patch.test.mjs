// STATE_DELTA patches: RFC 6902 through fast-json-patch, atomic, in place, as strict as the hub.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { applyPatch, checkPatch, MalformedPatch, PatchFailed, valueAt, jsonEqual } from "../src/agui-hub.js";

const apply = (root, ...ops) => {
  const doc = { root };
  applyPatch(doc, checkPatch(ops).ops);
  return doc.root;
};

describe("checkPatch", () => {
  test("rejects what is structurally wrong", () => {
    for (const bad of [
      {},
      [1],
      [{ path: "/a" }],
      [{ op: "add", path: "a", value: 1 }],
      [{ op: "add", path: "/a" }],
      [{ op: "move", path: "/a" }],
      [{ op: "replace", path: "/a~2", value: 1 }],
    ]) {
      assert.throws(() => checkPatch(bad), MalformedPatch, JSON.stringify(bad));
    }
  });

  test("drops unknown operations (AG-UI's open operations) and says which", () => {
    const { ops, dropped } = checkPatch([
      { op: "x-merge", path: "/a" },
      { op: "remove", path: "/b" },
    ]);
    assert.deepEqual(ops, [{ op: "remove", path: "/b" }]);
    assert.deepEqual(dropped, ["x-merge"]);
  });
});

describe("applyPatch", () => {
  test("applies every RFC 6902 operation", () => {
    const state = apply(
      { a: { b: [1, 2] }, c: "x", "k/~": 0 },
      { op: "add", path: "/a/b/1", value: 9 },
      { op: "add", path: "/a/b/-", value: 3 },
      { op: "replace", path: "/c", value: { deep: true } },
      { op: "copy", from: "/c", path: "/d" },
      { op: "move", from: "/a/b/0", path: "/first" },
      { op: "remove", path: "/k~1~0" },
      { op: "test", path: "/a/b", value: [9, 2, 3] },
    );
    assert.deepEqual(state, { a: { b: [9, 2, 3] }, c: { deep: true }, d: { deep: true }, first: 1 });
    state.d.deep = false;
    assert.equal(state.c.deep, true, "a copy is a copy");
  });

  test("replaces the whole document at the root pointer", () => {
    assert.deepEqual(apply({ a: 1 }, { op: "replace", path: "", value: [1] }), [1]);
    assert.deepEqual(apply({ a: { b: 2 } }, { op: "move", from: "/a", path: "" }), { b: 2 });
  });

  test("a failing operation undoes the ones before it, in place", () => {
    const list = [1, 2];
    const inner = { k: "v" };
    const root = { list, inner, n: 1 };
    const before = structuredClone(root);
    const doc = { root };
    assert.throws(
      () =>
        applyPatch(doc, [
          { op: "add", path: "/list/0", value: 0 },
          { op: "remove", path: "/list/2" },
          { op: "replace", path: "/n", value: 2 },
          { op: "add", path: "/inner/new", value: 1 },
          { op: "remove", path: "/inner/k" },
          { op: "move", from: "/n", path: "/moved" },
          { op: "copy", from: "/list", path: "/copy" },
          { op: "replace", path: "", value: "gone" },
          { op: "test", path: "/nope", value: 1 },
        ]),
      PatchFailed,
    );
    assert.deepEqual(doc.root, before);
    assert.equal(doc.root, root);
    assert.equal(doc.root.list, list);
    assert.equal(doc.root.inner, inner);
  });

  test("is as strict as the hub where JavaScript objects are not JSON", () => {
    for (const op of [
      { op: "replace", path: "/toString", value: 1 }, // inherited, not a member
      { op: "remove", path: "/constructor" },
      { op: "add", path: "/list/01", value: 1 }, // not a canonical index
      { op: "add", path: "/list/3", value: 1 }, // past the end
      { op: "move", from: "/obj", path: "/obj/inside" },
      { op: "remove", path: "" },
      { op: "test", path: "/n", value: true }, // 1 is not true
      { op: "add", path: "/__proto__/polluted", value: 1 },
    ]) {
      const doc = { root: { list: [0, 1], obj: {}, n: 1 } };
      assert.throws(() => applyPatch(doc, [op]), PatchFailed, JSON.stringify(op));
      assert.deepEqual(doc.root, { list: [0, 1], obj: {}, n: 1 });
    }
    assert.equal({}.polluted, undefined);
  });

  test("never shares objects with the event that carried the value", () => {
    const value = { nested: [1] };
    const state = apply({}, { op: "add", path: "/v", value });
    value.nested.push(2);
    assert.deepEqual(state, { v: { nested: [1] } });
  });

  test("costs the patch, not the document: a one-op delta on a large state", () => {
    const big = { items: Array.from({ length: 200_000 }, (_, i) => ({ i, text: "x".repeat(20) })) };
    const doc = { root: big };
    const started = performance.now();
    for (let i = 0; i < 1_000; i++) applyPatch(doc, [{ op: "replace", path: "/items/5/i", value: i }]);
    const perOp = (performance.now() - started) / 1_000;
    assert.equal(doc.root, big);
    assert.ok(perOp < 2, `one op took ${perOp.toFixed(3)} ms on a 200k-item state`);
  });
});

test("valueAt and jsonEqual read JSON as JSON", () => {
  assert.equal(valueAt({ a: [{ b: 1 }] }, "/a/0/b"), 1);
  assert.equal(valueAt({ a: 1 }, "/toString"), undefined);
  assert.equal(valueAt({ a: 1 }, "/a/b"), undefined);
  assert.ok(jsonEqual({ a: [1, { b: null }] }, { a: [1, { b: null }] }));
  assert.ok(!jsonEqual({ a: 1 }, { a: 1, b: undefined }));
  assert.ok(!jsonEqual([1], { 0: 1 }));
});
