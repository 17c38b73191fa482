// A thread's messages: built from streamed events, reconciled with MESSAGES_SNAPSHOT.
//
// The same rules as the hub's own copy (hub/core/messages.py), which follow the official AG-UI
// client, so a copy that followed the stream holds exactly what the hub holds. Messages are kept
// in their wire form (camelCase objects), in order, with an index by id.

import { applyPatch, checkPatch, cloneJson } from "./patch.js";

/** Roles a producer usually does not track; they survive a snapshot that carries none of them. */
export const CLIENT_SIDE_ROLES = new Set(["activity", "reasoning"]);

/**
 * MESSAGES_SNAPSHOT reconciliation, as AG-UI 1.0 states it:
 * - a snapshot message whose id is held replaces the held copy in place (keeps its position);
 * - snapshot messages never seen are appended, in snapshot order;
 * - held messages missing from the snapshot are dropped, except `activity` and `reasoning`
 *   messages, unless the snapshot carries at least one message of that role (then the snapshot
 *   is the complete set for that role);
 * - held messages whose id is in `keep` are never dropped (they keep their position).
 */
export function reconcile(held, snapshot, keep = new Set()) {
  const byId = new Map(snapshot.map((m) => [m.id, m]));
  const roles = new Set(snapshot.map((m) => m.role));
  const result = [];
  const placed = new Set();
  for (const m of held) {
    if (byId.has(m.id)) {
      if (!placed.has(m.id)) {
        result.push(byId.get(m.id));
        placed.add(m.id);
      }
    } else if (keep.has(m.id) || (CLIENT_SIDE_ROLES.has(m.role) && !roles.has(m.role))) {
      result.push(m);
    }
  }
  for (const m of snapshot) {
    if (!placed.has(m.id)) {
      result.push(byId.get(m.id));
      placed.add(m.id);
    }
  }
  return result;
}

/** Ordered messages with an index by id. Mutated only through these methods. */
export class MessageLog {
  constructor(items = []) {
    /** The messages, in order, in wire form. Read-only for everyone but this class. */
    this.items = items;
    this.reindex();
  }

  reindex() {
    this.byId = new Map(this.items.map((m) => [m.id, m]));
    this.toolParent = new Map();
    for (const m of this.items) {
      for (const call of m.toolCalls ?? []) this.toolParent.set(call.id, m.id);
    }
  }

  get length() {
    return this.items.length;
  }

  get(id) {
    return this.byId.get(id);
  }

  append(message) {
    const existing = this.byId.get(message.id);
    if (existing !== undefined) {
      for (const key of Object.keys(existing)) delete existing[key];
      Object.assign(existing, message);
      return existing;
    }
    this.items.push(message);
    this.byId.set(message.id, message);
    return message;
  }

  /** The held messages that streaming items ("text:ID", "tool:ID", ...) write into, by id. */
  streamingInto(streaming) {
    const found = new Map();
    for (const key of streaming) {
      const [kind, itemId] = splitKey(key);
      let id = itemId;
      if (kind === "tool") id = this.toolParent.get(itemId) ?? "";
      else if (kind !== "text" && kind !== "reasoning") continue;
      if (this.byId.has(id)) found.set(id, this.byId.get(id));
    }
    return found;
  }

  /**
   * Reconcile with a MESSAGES_SNAPSHOT. `streaming` names the items still streaming: a snapshot
   * cannot drop the message they stream into, or the content still to come would have nowhere
   * to go; such a message is kept in its place.
   */
  replaceAll(snapshot, streaming = []) {
    const open = [...streaming];
    const keep = new Set(this.streamingInto(open).keys());
    const calls = [];
    for (const key of open) {
      if (!key.startsWith("tool:")) continue;
      const call = this.toolCall(key.slice(5));
      if (call !== undefined) calls.push([this.toolParent.get(key.slice(5)), call]);
    }
    this.items = reconcile(this.items, cloneJson(snapshot), keep);
    this.reindex();
    for (const [parentId, call] of calls) {
      // A streaming call the snapshot left out goes back.
      if (this.toolCall(call.id) === undefined) this.placeCall(call, parentId);
    }
  }

  // -- text and reasoning messages --------------------------------------------------------------

  /** Open a streamed message. An id already held is continued, as the official client does. */
  startText(id, role, name) {
    if (this.byId.has(id)) return;
    const message = { id, role, content: "" };
    if (name != null) message.name = name;
    this.append(message);
  }

  /** Append streamed text. A message that is gone, or whose content is not text, takes none. */
  appendText(id, delta) {
    const message = this.byId.get(id);
    if (message === undefined) return;
    const content = message.content;
    if (content == null || typeof content === "string") message.content = (content ?? "") + delta;
  }

  // -- tool calls -------------------------------------------------------------------------------

  /** Open a tool call in its parent assistant message; a held call id is continued in place. */
  startToolCall(toolCallId, name, parentMessageId) {
    const existing = this.toolCall(toolCallId);
    if (existing !== undefined) {
      existing.function.name = name;
      return;
    }
    const call = { id: toolCallId, type: "function", function: { name, arguments: "" } };
    this.placeCall(call, parentMessageId);
  }

  /**
   * Put a tool call where the official client does: into its parent if that is an assistant
   * message; else into a new assistant message named after the parent (when no message has
   * that id) or after the call (no parent, or a parent of another role).
   */
  placeCall(call, parentMessageId) {
    let parent = parentMessageId ? this.byId.get(parentMessageId) : undefined;
    if (parent === undefined || parent.role !== "assistant") {
      const taken = parent !== undefined || !parentMessageId;
      const id = taken ? call.id : parentMessageId;
      parent = this.append({ id, role: "assistant", toolCalls: [] });
    }
    if (!parent.toolCalls) parent.toolCalls = [];
    parent.toolCalls.push(call);
    this.toolParent.set(call.id, parent.id);
  }

  appendToolArgs(toolCallId, delta) {
    const call = this.toolCall(toolCallId);
    if (call !== undefined) call.function.arguments += delta;
  }

  toolCall(toolCallId) {
    const parentId = this.toolParent.get(toolCallId);
    const parent = parentId ? this.byId.get(parentId) : undefined;
    return (parent?.toolCalls ?? []).find((call) => call?.id === toolCallId);
  }

  addToolResult(id, toolCallId, content) {
    this.append({ id, role: "tool", toolCallId, content });
  }

  // -- activity ---------------------------------------------------------------------------------

  activitySnapshot(id, activityType, content, replace) {
    if (this.byId.has(id) && replace === false) return;
    this.append({ id, role: "activity", activityType, content: cloneJson(content) });
  }

  /** Apply a patch to an activity's content (atomic; throws PatchFailed/MalformedPatch). */
  activityDelta(id, activityType, patch) {
    const { ops } = checkPatch(patch);
    let message = this.byId.get(id);
    if (message === undefined) {
      // Checked first, so a failing patch leaves no empty activity behind.
      const doc = { root: {} };
      applyPatch(doc, ops);
      this.append({ id, role: "activity", activityType, content: doc.root });
      return;
    }
    const doc = { root: message.content };
    applyPatch(doc, ops);
    message.content = doc.root;
  }
}

function splitKey(key) {
  const at = key.indexOf(":");
  return at < 0 ? [key, ""] : [key.slice(0, at), key.slice(at + 1)];
}
