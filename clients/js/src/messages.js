// A thread's messages: built from streamed events, reconciled with MESSAGES_SNAPSHOT.
//
// The same rules as the hub's own copy (hub/core/messages.py and hub/core/fold.py), which fold
// every AG-UI 1.0 event as the official client (@ag-ui/client 1.0) does: the events' metadata
// into the message or tool call they build (never the hub's positions), names, subagent ids,
// encrypted values, tool results right after their call's message, a run's input messages, a
// snapshot's activity authority. So a copy that followed the stream holds exactly what the hub
// holds. Messages are kept in their wire form (camelCase objects), in order, with an index by id.

import { applyPatch, checkPatch, cloneJson } from "./patch.js";

/** Roles a producer usually does not track; they survive a snapshot that carries none of them. */
export const CLIENT_SIDE_ROLES = new Set(["activity", "reasoning"]);

/**
 * Where a MESSAGES_SNAPSHOT's metadata says which activity types it is the complete set of
 * (`{"@ag-ui/client": {authoritativeActivityTypes: [...] | null}}`), as the official client
 * reads it.
 */
export const ACTIVITY_HISTORY_METADATA = "@ag-ui/client";

/** Events that change the messages (the others change the state, the run, or nothing). */
export const MESSAGE_EVENTS = new Set([
  "RUN_STARTED",
  "MESSAGES_SNAPSHOT",
  "TEXT_MESSAGE_START",
  "TEXT_MESSAGE_CONTENT",
  "TEXT_MESSAGE_END",
  "TEXT_MESSAGE_CHUNK",
  "REASONING_MESSAGE_START",
  "REASONING_MESSAGE_CONTENT",
  "REASONING_MESSAGE_END",
  "REASONING_MESSAGE_CHUNK",
  "REASONING_ENCRYPTED_VALUE",
  "TOOL_CALL_START",
  "TOOL_CALL_ARGS",
  "TOOL_CALL_END",
  "TOOL_CALL_CHUNK",
  "TOOL_CALL_RESULT",
  "ACTIVITY_SNAPSHOT",
  "ACTIVITY_DELTA",
]);

const isObject = (value) => value !== null && typeof value === "object" && !Array.isArray(value);
const has = (object, key) => Object.prototype.hasOwnProperty.call(object, key);

/**
 * What a snapshot's `metadata` says of its activity messages, as the official client reads it:
 * false (nothing: the snapshot is complete for activities only if it carries one), null
 * (complete for every activity type), or the list of types it is complete for.
 */
export function authoritativeActivityTypes(metadata) {
  if (!isObject(metadata) || !has(metadata, ACTIVITY_HISTORY_METADATA)) return false;
  const value = metadata[ACTIVITY_HISTORY_METADATA];
  if (!isObject(value)) return [];
  if (!has(value, "authoritativeActivityTypes")) return false;
  const types = value.authoritativeActivityTypes;
  if (types === null) return null;
  return Array.isArray(types) && types.every((t) => typeof t === "string") ? types : [];
}

function withoutNullSubagent(message) {
  if (message?.subagentRunId !== null || !has(message, "subagentRunId")) return message;
  const { subagentRunId: _null, ...rest } = message;
  return rest;
}

/**
 * MESSAGES_SNAPSHOT reconciliation, as AG-UI 1.0 states it and the official client does it:
 * - a snapshot message whose id is held replaces the held copy in place (keeps its position);
 * - snapshot messages never seen are appended, in snapshot order;
 * - held messages missing from the snapshot are dropped (those still streaming too), except
 *   `reasoning` messages unless the snapshot carries one, and `activity` messages: unless the
 *   snapshot carries one, or, when its `metadata` names the activity types it is complete for,
 *   those of the types it names (all for null);
 * - a `subagentRunId: null` in a snapshot message is left out, as the client leaves it.
 */
export function reconcile(held, snapshot, metadata = undefined) {
  snapshot = snapshot.map(withoutNullSubagent);
  const byId = new Map(snapshot.map((m) => [m.id, m]));
  const roles = new Set(snapshot.map((m) => m.role));
  const owned = authoritativeActivityTypes(metadata);
  const preserved = (m) => {
    if (m.role === "reasoning") return !roles.has("reasoning");
    if (m.role !== "activity") return false;
    if (owned === false) return !roles.has("activity");
    return owned !== null && !owned.includes(m.activityType);
  };
  const result = [];
  const placed = new Set();
  for (const m of held) {
    if (byId.has(m.id)) {
      if (!placed.has(m.id)) {
        result.push(byId.get(m.id));
        placed.add(m.id);
      }
    } else if (preserved(m)) {
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

/**
 * Fold an event's metadata into the message or tool call it builds, key by key, the last write
 * winning (as the official client does), except the hub's own positions (`hub`).
 */
export function foldMetadata(target, event) {
  const metadata = event?.metadata;
  if (!target || !isObject(metadata)) return;
  const { hub: _position, ...incoming } = metadata;
  if (Object.keys(incoming).length) {
    target.metadata = { ...(target.metadata ?? {}), ...cloneJson(incoming) };
  }
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
    // A call id several messages hold (a MESSAGES_SNAPSHOT can say so) is the first one's: the
    // official client finds a call by searching the messages in order.
    for (const m of this.items) {
      for (const call of m.toolCalls ?? []) {
        if (!this.toolParent.has(call.id)) this.toolParent.set(call.id, m.id);
      }
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
      const heldCalls = (existing.toolCalls ?? []).length > 0;
      for (const key of Object.keys(existing)) delete existing[key];
      Object.assign(existing, message);
      if (heldCalls) this.reindex(); // its calls are gone: another message may hold one
      return existing;
    }
    this.items.push(message);
    this.byId.set(message.id, message);
    return message;
  }

  /** Reconcile with a MESSAGES_SNAPSHOT (its `metadata` too: see reconcile()). */
  replaceAll(snapshot, metadata = undefined) {
    this.items = reconcile(this.items, cloneJson(snapshot), metadata);
    this.reindex();
  }

  /** A RUN_STARTED's input.messages: those not held are appended, in order. */
  addHistory(messages) {
    for (const message of messages) {
      if (isObject(message) && !this.byId.has(message.id)) {
        this.append(cloneJson(withoutNullSubagent(message)));
      }
    }
  }

  /** REASONING_ENCRYPTED_VALUE: on the tool call (subtype "tool-call") or the message. */
  encryptedValue(subtype, entityId, value) {
    if (subtype === "tool-call") {
      const call = this.toolCall(entityId);
      if (call !== undefined) call.encryptedValue = value;
      return;
    }
    const message = this.byId.get(entityId);
    if (message !== undefined && message.role !== "activity") message.encryptedValue = value;
  }

  // -- text and reasoning messages --------------------------------------------------------------

  /** Open a streamed message. An id already held is continued, as the official client does. */
  startText(id, role, name = null, subagent = null, event = null) {
    const existing = this.byId.get(id);
    if (existing !== undefined) {
      if (existing.role !== "activity") foldMetadata(existing, event);
      return;
    }
    const message = { id, role, content: "" };
    if (name != null) message.name = name;
    if (subagent != null) message.subagentRunId = subagent;
    foldMetadata(message, event);
    this.append(message);
  }

  /** Append streamed text. A message that is gone, or an activity, takes none. */
  appendText(id, delta, event = null) {
    const message = this.byId.get(id);
    if (message === undefined || message.role === "activity") return;
    message.content = (typeof message.content === "string" ? message.content : "") + delta;
    foldMetadata(message, event);
  }

  /** A message's end: it takes the end event's metadata (an activity takes none). */
  endText(id, event) {
    const message = this.byId.get(id);
    if (message !== undefined && message.role !== "activity") foldMetadata(message, event);
  }

  // -- tool calls -------------------------------------------------------------------------------

  /** Open a tool call in its parent assistant message; a held call id is continued in place. */
  startToolCall(toolCallId, name, parentMessageId, subagent = null, event = null) {
    const existing = this.toolCall(toolCallId);
    if (existing !== undefined) {
      existing.function.name = name;
      foldMetadata(existing, event);
      return;
    }
    const call = { id: toolCallId, type: "function", function: { name, arguments: "" } };
    foldMetadata(call, event);
    this.placeCall(call, parentMessageId, subagent);
  }

  /**
   * Put a tool call where the official client does: into its parent if that is an assistant
   * message; else into a new assistant message named after the parent (when no message has
   * that id) or after the call (no parent, or a parent of another role).
   */
  placeCall(call, parentMessageId, subagent = null) {
    let parent = parentMessageId ? this.byId.get(parentMessageId) : undefined;
    if (parent === undefined || parent.role !== "assistant") {
      const taken = parent !== undefined || !parentMessageId;
      const id = taken ? call.id : parentMessageId;
      const created = { id, role: "assistant", toolCalls: [] };
      if (subagent != null && !this.byId.has(id)) created.subagentRunId = subagent;
      parent = this.append(created);
    }
    if (!parent.toolCalls) parent.toolCalls = [];
    parent.toolCalls.push(call);
    this.toolParent.set(call.id, parent.id);
  }

  appendToolArgs(toolCallId, delta, event = null) {
    const call = this.toolCall(toolCallId);
    if (call === undefined) return;
    call.function.arguments += delta;
    foldMetadata(call, event);
  }

  /** A tool call's end: the call takes its metadata. */
  endToolCall(toolCallId, event) {
    foldMetadata(this.toolCall(toolCallId), event);
  }

  toolCall(toolCallId) {
    const parentId = this.toolParent.get(toolCallId);
    const parent = parentId ? this.byId.get(parentId) : undefined;
    return (parent?.toolCalls ?? []).find((call) => call?.id === toolCallId);
  }

  /**
   * A tool's result, as the official client places it: right after the assistant message
   * holding the call and the tool messages that follow it, else at the end. (A held id is
   * replaced in place; the hub refuses such a result, so a mirror never receives one.)
   */
  addToolResult(id, toolCallId, content, role = null, subagent = null, event = null) {
    const message = { id, role: role || "tool", toolCallId, content };
    if (subagent != null) message.subagentRunId = subagent;
    foldMetadata(message, event);
    if (this.byId.has(id)) {
      this.append(message);
      return;
    }
    const ownerId = this.toolParent.get(toolCallId);
    const owner = ownerId ? this.byId.get(ownerId) : undefined;
    if (owner === undefined || owner.role !== "assistant") {
      this.append(message);
      return;
    }
    let at = this.items.indexOf(owner) + 1;
    while (at < this.items.length && this.items[at].role === "tool") at += 1;
    this.items.splice(at, 0, message);
    this.byId.set(id, message);
  }

  // -- activity ---------------------------------------------------------------------------------

  /**
   * As the official client: a new id is appended; a held activity is replaced in place (keeping
   * its other fields) unless `replace` is false; a held message of another role becomes this
   * activity unless `replace` is false. What it lands in takes the event's metadata.
   */
  activitySnapshot(id, activityType, content, replace, subagent = null, event = null) {
    const existing = this.byId.get(id);
    const fresh = { id, role: "activity", activityType, content: cloneJson(content) };
    if (subagent != null) fresh.subagentRunId = subagent;
    let target = null;
    if (existing === undefined) {
      target = this.append(fresh);
    } else if (existing.role === "activity") {
      if (replace !== false) {
        delete existing.subagentRunId;
        Object.assign(existing, fresh);
      }
      target = existing;
    } else if (replace !== false) {
      target = this.append(fresh);
    }
    foldMetadata(target, event);
  }

  /**
   * Apply a patch to a held activity's content (atomic; throws PatchFailed/MalformedPatch); it
   * takes `activityType` and the event's metadata. An id nobody holds takes nothing.
   */
  activityDelta(id, activityType, patch, event = null) {
    const { ops } = checkPatch(patch);
    const message = this.byId.get(id);
    if (message === undefined) return;
    if (message.role !== "activity") throw new TypeError(`message '${id}' is not an activity`);
    const doc = { root: message.content ?? {} };
    applyPatch(doc, ops);
    message.content = doc.root;
    message.activityType = activityType;
    foldMetadata(message, event);
  }
}

/** The start event of each kind of item a chunk streams into. */
const CHUNK_STARTS = {
  text: "TEXT_MESSAGE_START",
  reasoning: "REASONING_MESSAGE_START",
  tool: "TOOL_CALL_START",
};

/**
 * The start event a chunk that opens its item stands for, as the official client turns chunks
 * into events (`kind`: text, reasoning or tool; `itemId`: the item it opens).
 */
export function chunkOpener(kind, itemId, event) {
  const start = { type: CHUNK_STARTS[kind] };
  if (kind === "tool") {
    start.toolCallId = itemId;
    start.toolCallName = event.toolCallName;
    if (event.parentMessageId) start.parentMessageId = event.parentMessageId;
  } else {
    start.messageId = itemId;
    if (kind === "text") {
      start.role = event.role || "assistant";
      if (event.name != null) start.name = event.name;
    }
  }
  if (event.subagentRunId != null) start.subagentRunId = event.subagentRunId;
  return start;
}

const CHUNK_KINDS = {
  TEXT_MESSAGE_CHUNK: "text",
  REASONING_MESSAGE_CHUNK: "reasoning",
  TOOL_CALL_CHUNK: "tool",
};

/**
 * Fold one event into `messages` (hub/core/fold.py). For a chunk event, `chunk` is
 * `[itemId, opens]`: the item it streams into, and whether it opens (or re-opens) it rather than
 * continuing the chunked item; the answer is then the start event an opening chunk stands for,
 * else null.
 */
export function fold(messages, event, chunk = null) {
  const kind = CHUNK_KINDS[event.type];
  if (kind !== undefined) {
    const [itemId, opens] = chunk;
    const start = opens ? chunkOpener(kind, itemId, event) : null;
    if (kind === "tool") {
      if (start !== null) {
        messages.startToolCall(itemId, start.toolCallName, start.parentMessageId, start.subagentRunId, event);
      }
      messages.appendToolArgs(itemId, event.delta || "", event);
    } else {
      if (start !== null) {
        messages.startText(itemId, start.role ?? "reasoning", start.name, start.subagentRunId, event);
      }
      messages.appendText(itemId, event.delta || "", event);
    }
    return start;
  }
  switch (event.type) {
    case "RUN_STARTED": {
      const history = isObject(event.input) ? event.input.messages : undefined;
      if (Array.isArray(history)) messages.addHistory(history);
      break;
    }
    case "MESSAGES_SNAPSHOT":
      messages.replaceAll(event.messages, event.metadata);
      break;
    case "TEXT_MESSAGE_START":
      messages.startText(event.messageId, event.role || "assistant", event.name, event.subagentRunId, event);
      break;
    case "REASONING_MESSAGE_START":
      messages.startText(event.messageId, "reasoning", null, event.subagentRunId, event);
      break;
    case "TEXT_MESSAGE_CONTENT":
    case "REASONING_MESSAGE_CONTENT":
      messages.appendText(event.messageId, event.delta, event);
      break;
    case "TEXT_MESSAGE_END":
    case "REASONING_MESSAGE_END":
      messages.endText(event.messageId, event);
      break;
    case "REASONING_ENCRYPTED_VALUE":
      messages.encryptedValue(event.subtype, event.entityId, event.encryptedValue);
      break;
    case "TOOL_CALL_START":
      messages.startToolCall(
        event.toolCallId,
        event.toolCallName,
        event.parentMessageId,
        event.subagentRunId,
        event,
      );
      break;
    case "TOOL_CALL_ARGS":
      messages.appendToolArgs(event.toolCallId, event.delta, event);
      break;
    case "TOOL_CALL_END":
      messages.endToolCall(event.toolCallId, event);
      break;
    case "TOOL_CALL_RESULT":
      messages.addToolResult(
        event.messageId,
        event.toolCallId,
        event.content,
        event.role,
        event.subagentRunId,
        event,
      );
      break;
    case "ACTIVITY_SNAPSHOT":
      messages.activitySnapshot(
        event.messageId,
        event.activityType,
        event.content,
        event.replace,
        event.subagentRunId,
        event,
      );
      break;
    case "ACTIVITY_DELTA":
      messages.activityDelta(event.messageId, event.activityType, event.patch, event);
      break;
    default:
      break;
  }
  return null;
}
