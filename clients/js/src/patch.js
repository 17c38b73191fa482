// Atomic RFC 6902 JSON Patch, applied in place with fast-json-patch.
//
// A STATE_DELTA must apply atomically: all of it or none of it. fast-json-patch makes a patch
// atomic only by deep-cloning the whole document first (mutateDocument=false), which costs the
// size of the state on every delta. Here each operation is applied in place by fast-json-patch's
// own applyOperation, and before each one an undo step is recorded (the inverse of what it is
// about to do, at the cost of the operation, not of the document). If any operation fails,
// the journal is replayed backwards and the document is exactly as it was: same values, same
// object identities.
//
// Resolution follows the hub (hub/core/patch.py) where JavaScript objects differ from JSON:
// only own members count ("/toString" of {} does not exist), array indices are canonical
// ("01" is not an index), and a value cannot be moved into one of its own children. Values an
// operation inserts are deep-copied, so the state never shares objects with the event that
// carried them.

import { applyOperation, deepClone } from "../vendor/fast-json-patch/core.mjs";

/** The operations RFC 6902 defines; AG-UI's "open operations" beyond these are dropped. */
export const KNOWN_OPS = new Set(["add", "remove", "replace", "move", "copy", "test"]);
const POINTER = /^(\/([^/~]|~[01])*)*$/;
const INDEX = /^(0|[1-9][0-9]*)$/;

/** A patch that is structurally wrong (not a list of operations, a bad pointer...). */
export class MalformedPatch extends Error {
  name = "MalformedPatch";
}

/** A well-formed patch that does not apply to this document (a failed `test` included). */
export class PatchFailed extends Error {
  name = "PatchFailed";
}

/**
 * Check a patch's structure. Returns `{ops, dropped}`: the operations to apply and the names of
 * unknown operations left out. Throws MalformedPatch for anything structurally wrong.
 */
export function checkPatch(delta) {
  if (!Array.isArray(delta)) throw new MalformedPatch("a patch must be a JSON array of operations");
  const ops = [];
  const dropped = [];
  delta.forEach((op, i) => {
    if (!isObject(op)) throw new MalformedPatch(`operation ${i} is not an object`);
    if (typeof op.op !== "string") throw new MalformedPatch(`operation ${i} has no string 'op'`);
    if (!KNOWN_OPS.has(op.op)) {
      dropped.push(op.op.slice(0, 64));
      return;
    }
    checkPointer(op, "path", i);
    if (op.op === "move" || op.op === "copy") checkPointer(op, "from", i);
    if ((op.op === "add" || op.op === "replace" || op.op === "test") && !("value" in op)) {
      throw new MalformedPatch(`operation ${i} (${op.op}) has no 'value'`);
    }
    ops.push(op);
  });
  return { ops, dropped };
}

function checkPointer(op, member, i) {
  const pointer = op[member];
  if (typeof pointer !== "string" || !POINTER.test(pointer)) {
    throw new MalformedPatch(`operation ${i} has no valid JSON Pointer in '${member}'`);
  }
}

/** The reference tokens of an RFC 6901 pointer: "/a~1b/0" -> ["a/b", "0"]. */
export function parsePointer(pointer) {
  if (pointer === "") return [];
  if (!POINTER.test(pointer)) throw new MalformedPatch(`not a JSON Pointer: ${pointer}`);
  return pointer
    .slice(1)
    .split("/")
    .map((part) => part.replace(/~1/g, "/").replace(/~0/g, "~"));
}

/** The pointer for reference tokens (the inverse of parsePointer). */
export function formatPointer(parts) {
  return parts.map((p) => "/" + String(p).replace(/~/g, "~0").replace(/\//g, "~1")).join("");
}

/**
 * Apply checked `ops` to `doc` (an object holding the document in `doc.root`, since a patch may
 * replace the root) atomically, in place. Throws PatchFailed and leaves `doc` untouched if any
 * operation fails.
 */
export function applyPatch(doc, ops) {
  const journal = [];
  try {
    ops.forEach((op, i) => {
      try {
        applyOne(doc, op, journal);
      } catch (err) {
        if (err instanceof MalformedPatch) throw err;
        const reason = err instanceof PatchFailed ? err.message : String(err?.message ?? err);
        throw new PatchFailed(`operation ${i} (${op.op} ${op.path}): ${reason}`);
      }
    });
  } catch (err) {
    for (let i = journal.length - 1; i >= 0; i--) journal[i]();
    throw err;
  }
}

/** The value at `pointer` in `root`, or `undefined` if there is none (own members only). */
export function valueAt(root, pointer) {
  try {
    return resolve(root, parsePointer(pointer));
  } catch (err) {
    if (err instanceof PatchFailed) return undefined;
    throw err;
  }
}

/** Whether two JSON values are equal as JSON (deep; member order does not matter). */
export function jsonEqual(a, b) {
  if (a === b) return true;
  if (Array.isArray(a)) {
    return Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  }
  if (isObject(a) && isObject(b)) {
    const keys = Object.keys(a);
    return (
      keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && jsonEqual(a[k], b[k]))
    );
  }
  return false;
}

/** A deep copy of a JSON value. */
export function cloneJson(value) {
  if (value === null || typeof value !== "object") return value;
  return deepClone(value);
}

// -- one operation ------------------------------------------------------------------------------

function applyOne(doc, op, journal) {
  const parts = parsePointer(op.path);
  switch (op.op) {
    case "test":
      if (!jsonEqual(resolve(doc.root, parts), op.value)) {
        throw new PatchFailed("test failed: the value differs");
      }
      return;
    case "add":
      add(doc, parts, op.path, cloneJson(op.value), journal);
      return;
    case "remove":
      remove(doc, parts, op.path, journal);
      return;
    case "replace":
      replace(doc, parts, op.path, cloneJson(op.value), journal);
      return;
    case "copy":
      add(doc, parts, op.path, cloneJson(resolve(doc.root, parsePointer(op.from))), journal);
      return;
    case "move": {
      const source = parsePointer(op.from);
      if (op.from === op.path) {
        resolve(doc.root, source); // must exist; otherwise a no-op
        return;
      }
      if (op.path.startsWith(op.from + "/")) {
        throw new PatchFailed("cannot move a value into one of its own children");
      }
      const value = remove(doc, source, op.from, journal);
      add(doc, parts, op.path, value, journal);
      return;
    }
    default: // checkPatch drops unknown operations
      throw new PatchFailed(`unknown op '${op.op}'`);
  }
}

/** Run one operation through fast-json-patch, in place, with its validation on. */
function library(doc, operation) {
  const result = applyOperation(doc.root, operation, true, true, true);
  doc.root = result.newDocument;
  return result;
}

function add(doc, parts, path, value, journal) {
  if (parts.length === 0) {
    const old = doc.root;
    doc.root = value;
    journal.push(() => (doc.root = old));
    return;
  }
  const parent = resolve(doc.root, parts.slice(0, -1));
  const key = parts[parts.length - 1];
  if (Array.isArray(parent)) {
    const index = arrayIndex(parent, key, true);
    library(doc, { op: "add", path, value });
    journal.push(() => parent.splice(index, 1));
  } else if (isObject(parent)) {
    const had = Object.hasOwn(parent, key);
    const previous = parent[key];
    library(doc, { op: "add", path, value });
    journal.push(had ? () => (parent[key] = previous) : () => delete parent[key]);
  } else {
    throw new PatchFailed(`cannot add into ${describe(parent)}`);
  }
}

function remove(doc, parts, path, journal) {
  if (parts.length === 0) throw new PatchFailed("cannot remove the whole document");
  const parent = resolve(doc.root, parts.slice(0, -1));
  const key = parts[parts.length - 1];
  if (Array.isArray(parent)) {
    const index = arrayIndex(parent, key, false);
    const value = parent[index];
    library(doc, { op: "remove", path });
    journal.push(() => parent.splice(index, 0, value));
    return value;
  }
  if (isObject(parent)) {
    if (!Object.hasOwn(parent, key)) throw new PatchFailed(`no member '${key}'`);
    const value = parent[key];
    library(doc, { op: "remove", path });
    journal.push(() => (parent[key] = value));
    return value;
  }
  throw new PatchFailed(`cannot remove from ${describe(parent)}`);
}

function replace(doc, parts, path, value, journal) {
  if (parts.length === 0) {
    add(doc, parts, path, value, journal);
    return;
  }
  const parent = resolve(doc.root, parts.slice(0, -1));
  const key = parts[parts.length - 1];
  if (Array.isArray(parent)) {
    const index = arrayIndex(parent, key, false);
    const previous = parent[index];
    library(doc, { op: "replace", path, value });
    journal.push(() => (parent[index] = previous));
  } else if (isObject(parent)) {
    if (!Object.hasOwn(parent, key)) throw new PatchFailed(`no member '${key}'`);
    const previous = parent[key];
    library(doc, { op: "replace", path, value });
    journal.push(() => (parent[key] = previous));
  } else {
    throw new PatchFailed(`cannot replace in ${describe(parent)}`);
  }
}

// -- resolution ---------------------------------------------------------------------------------

function resolve(root, parts) {
  let node = root;
  for (const part of parts) {
    if (Array.isArray(node)) node = node[arrayIndex(node, part, false)];
    else if (isObject(node)) {
      if (!Object.hasOwn(node, part)) throw new PatchFailed(`no member '${part}'`);
      node = node[part];
    } else throw new PatchFailed(`cannot descend into ${describe(node)} with '${part}'`);
  }
  return node;
}

function arrayIndex(array, part, allowEnd) {
  if (part === "-" && allowEnd) return array.length;
  if (!INDEX.test(part)) throw new PatchFailed(`'${part}' is not an array index`);
  const index = Number(part);
  if (index > (allowEnd ? array.length : array.length - 1)) {
    throw new PatchFailed(`index ${index} is out of range`);
  }
  return index;
}

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function describe(value) {
  return value === null ? "null" : `a ${typeof value}`;
}
