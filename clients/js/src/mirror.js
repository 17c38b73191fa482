// A consumer's copy of one thread, kept in line with the hub. Sans-I/O.
//
// Feed Mirror.receive() every decoded frame the hub sends; it applies what it should to the
// state and messages and answers with a step: the event it applied (if any), the commands to send
// back (a hub.resync when this copy can no longer follow), and any hub.error or hub.welcome. It
// never touches a socket or a clock, so it is tested by feeding it frames. It is the same machine
// as the Python client's Mirror (clients/python/agui_hub_client/mirror.py); the rules:
//
// - Every sequenced event carries metadata.hub = {seq, epoch}. One at or below the held position
//   is a duplicate and is ignored; seq == position + 1 is applied, and so is one whose prev (the
//   seq of the frame before it in a subtree consumer's stream, where the events between were not
//   sent) is at or below the position; anything further ahead is a gap: ask hub.resync with
//   reason "gap".
// - An event that fails to apply locally (a STATE_DELTA that does not apply, content for a
//   message this copy does not hold) leaves the copy untouched (patches are atomic) and asks
//   hub.resync with reason "patch_failed".
// - After asking, live events are ignored until the hub's STATE_SNAPSHOT sync frame arrives.
// - Frames marked metadata.hub.sync are the hub's repair (or join) frames: always applied, and
//   they set the position to their seq; they are not log entries.
// - A welcome whose epoch differs from the one held means the thread's history was recreated:
//   the hub sends a snapshot, and live events are ignored until it arrives.
// - Streaming items are followed the way the hub follows what it sent this consumer, so chunk
//   events continue or restart a message exactly as the hub's thread does, across repairs too.

import { fold, MESSAGE_EVENTS, MessageLog } from "./messages.js";
import { applyPatch, checkPatch, cloneJson, parsePointer, PatchFailed, MalformedPatch } from "./patch.js";

export const GAP = "gap";
export const PATCH_FAILED = "patch_failed";

/** How each kind of streaming item opens, carries content, and ends (hub/core/thread.py). */
export const STREAMING = {
  step: ["STEP_STARTED", null, "STEP_FINISHED", "stepName"],
  phase: ["REASONING_START", null, "REASONING_END", "messageId"],
  text: ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "messageId"],
  reasoning: ["REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_END", "messageId"],
  tool: ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "toolCallId"],
};
// What the mirror follows as streaming: those, and a subagent's invocation (AG-UI 1.0), open
// from SUBAGENT_STARTED to SUBAGENT_FINISHED or SUBAGENT_ERROR, which the hub re-opens too.
export const FOLLOWED = {
  ...STREAMING,
  subagent: ["SUBAGENT_STARTED", null, "SUBAGENT_FINISHED", "subagentRunId"],
};
/** Start event type -> kind, and end event type -> kind, of what FOLLOWED holds open. */
export const STARTS = new Map(Object.entries(FOLLOWED).map(([kind, spec]) => [spec[0], kind]));
export const ENDS = new Map([
  ...Object.entries(FOLLOWED).map(([kind, spec]) => [spec[2], kind]),
  ["SUBAGENT_ERROR", "subagent"],
]);
const CHUNKS = {
  TEXT_MESSAGE_CHUNK: ["text", "messageId"],
  REASONING_MESSAGE_CHUNK: ["reasoning", "messageId"],
  TOOL_CALL_CHUNK: ["tool", "toolCallId"],
};
/**
 * Chunk lanes (hub/core/streaming.py): chunk events stream into one item per agent, its lane
 * (the chunks' subagentRunId; none: the parent agent), as the official client turns chunks into
 * events. Events that close every lane; events that close the lane of the agent they speak for
 * (their subagentRunId, none: the parent's; a subagent's end only when it names one). The others
 * (chunks, RAW, ACTIVITY_*, REASONING_ENCRYPTED_VALUE, SUBAGENT_STARTED) close none.
 */
const CLOSES_ALL_LANES = new Set(["RUN_STARTED", "RUN_FINISHED", "RUN_ERROR", "MESSAGES_SNAPSHOT"]);
const CLOSES_OWN_LANE = new Set([
  "TEXT_MESSAGE_START",
  "TEXT_MESSAGE_CONTENT",
  "TEXT_MESSAGE_END",
  "TOOL_CALL_START",
  "TOOL_CALL_ARGS",
  "TOOL_CALL_END",
  "TOOL_CALL_RESULT",
  "STATE_SNAPSHOT",
  "STATE_DELTA",
  "CUSTOM",
  "STEP_STARTED",
  "STEP_FINISHED",
  "REASONING_START",
  "REASONING_MESSAGE_START",
  "REASONING_MESSAGE_CONTENT",
  "REASONING_MESSAGE_END",
  "REASONING_END",
  "SUBAGENT_FINISHED",
  "SUBAGENT_ERROR",
]);
const SUBAGENT_ENDS = new Set(["SUBAGENT_FINISHED", "SUBAGENT_ERROR"]);
/** Events that change the state, and events that change the messages. */
export const STATE_EVENTS = new Set(["STATE_SNAPSHOT", "STATE_DELTA"]);
export { MESSAGE_EVENTS };
/** Bounds the hub puts on a hub.resync "holding" claim (hub/wire/control.py). */
const MAX_HOLDING_ITEMS = 256;
const MAX_ID_LENGTH = 256;

/** An event that does not apply to this copy: the copy is not what the hub thinks. */
export class LocalFailure extends Error {
  name = "LocalFailure";
}

/** `[name, value]` of a hub control frame (a CUSTOM event named hub.*), else null. */
export function hubControl(frame) {
  if (frame?.type === "CUSTOM" && typeof frame.name === "string" && frame.name.startsWith("hub.")) {
    return [frame.name, frame.value];
  }
  return null;
}

/** The hub position of a sequenced event ({seq, epoch, sync?}), else null. */
export function positionOf(frame) {
  const hub = frame?.metadata?.hub;
  return hub !== null && typeof hub === "object" && Number.isInteger(hub.seq) ? hub : null;
}

function step(fields = {}) {
  return { applied: null, send: [], error: null, welcome: null, control: null, ...fields };
}

function need(event, field) {
  const value = event[field];
  if (value === undefined || value === null) throw new LocalFailure(`no '${field}'`);
  return value;
}

export class Mirror {
  /**
   * `state`, `messages`, `since`, `epoch` start the copy from a known position (for example one
   * saved earlier); without `since` the copy waits for the hub's join snapshot.
   */
  constructor({ state, messages, since, epoch } = {}) {
    this.doc = { root: state === undefined || state === null ? {} : cloneJson(state) };
    this.messages = new MessageLog(messages ? cloneJson(messages) : []);
    this.seq = since ?? 0;
    this.epoch = epoch ?? null;
    /** Why live events are being ignored until a snapshot arrives, or null. */
    this.awaiting = since == null ? "join" : null;
    /**
     * A repair is half applied: its STATE_SNAPSHOT is in, the MESSAGES_SNAPSHOT the hub sends
     * right after it is not yet (until then the messages are the old ones).
     */
    this.partial = false;
    /** How many times this copy asked for a resync, by reason. */
    this.resyncs = {};
    /** STATE_SNAPSHOT sync frames applied (joins and repairs, asked for or not). */
    this.snapshots = 0;
    this.duplicates = 0;
    this.dropped = 0;
    /** Problems found in frames the hub sent (not applicable as sync), newest last. */
    this.localErrors = [];
    this._drop = 0;
    // What the hub has sent as still streaming ("text:ID", "tool:ID", ...), followed as the hub
    // follows it for this consumer (hub/core/consumer.py ConsumerView), in opening order; and
    // the chunk lanes: agent (subagentRunId, null: the parent) -> the item its chunks stream into.
    this.open = new Set();
    /** The run this copy has open (RUN_STARTED seen, not yet finished). */
    this.runId = null;
    this.lanes = new Map();
    this._resuming = false;
  }

  get state() {
    return this.doc.root;
  }

  // -- connection lifecycle ---------------------------------------------------------------------

  /** `[since, epoch]` to reconnect with, or `[null, null]` to ask for a fresh join. */
  resumePosition() {
    if (this.awaiting !== null || this.epoch === null) return [null, null];
    return [this.seq, this.epoch];
  }

  /** A new connection is open; `resumed` if it was opened with `since`. */
  connected(resumed) {
    if (!resumed) {
      this.awaiting = "join"; // the hub treats it as a fresh join and re-sends what is open
      this._forgetStreaming();
    }
    this._resuming = resumed;
  }

  _forgetStreaming() {
    this.runId = null;
    this.open.clear();
    this.lanes.clear();
  }

  // -- frames -----------------------------------------------------------------------------------

  /** Take one decoded frame from the hub. */
  receive(frame) {
    const position = positionOf(frame);
    const control = hubControl(frame);
    // A hub.* event with a position is one of the thread's (hub.interrupt_resolved): it takes
    // its seq as any event does. Control frames carry none.
    if (control !== null && position === null) {
      if (control[0] !== "hub.error") this.partial = false;
      return this._control(control[0], control[1]);
    }
    if (!position?.sync) this.partial = false;
    if (position === null) return this._applyLive(frame); // not sequenced: apply as it comes
    if (this._resuming) {
      this._resuming = false;
      if (position.sync) this._forgetStreaming(); // not a replay: a join from scratch follows
    }
    if (position.sync) return this._sync(frame, position);
    if (this._drop > 0) {
      this._drop -= 1;
      this.dropped += 1;
      return step();
    }
    const seq = position.seq;
    if (this.awaiting !== null) {
      this._observe(frame);
      return step();
    }
    if (this.epoch !== null && position.epoch !== this.epoch) {
      this._observe(frame);
      return this.resync(GAP);
    }
    if (seq <= this.seq) {
      this.duplicates += 1;
      return step();
    }
    // A subtree's consumer is sent nothing for events that leave its subtree alone; the next
    // frame says where its stream was before it (prev): holding that much is no gap.
    const prev = position.prev;
    if (seq > this.seq + 1 && !(Number.isInteger(prev) && prev <= this.seq)) {
      this._observe(frame);
      return this.resync(GAP);
    }
    const result = this._applyLive(frame);
    if (result.applied !== null) {
      this.seq = seq;
      this.epoch = position.epoch ?? this.epoch;
    }
    return result;
  }

  _control(name, value) {
    const isObj = value !== null && typeof value === "object";
    if (name === "hub.welcome" && isObj) {
      if (typeof value.resumed === "boolean") {
        if (this._resuming && !value.resumed) this._forgetStreaming(); // a join follows
        this._resuming = false;
      }
      if (this.awaiting === null) {
        if (this.epoch !== null && value.epoch !== this.epoch) this.awaiting = "epoch_changed";
        else if (Number.isInteger(value.seq) && value.seq < this.seq) this.awaiting = "resume_too_new";
      }
      return step({ welcome: value });
    }
    if (name === "hub.error" && isObj) return step({ error: value });
    if (name === "hub.heartbeat" && isObj && this.awaiting === null) {
      // The hub had sent everything up to value.seq: holding less means a lost tail.
      if (value.epoch === this.epoch && Number.isInteger(value.seq) && value.seq > this.seq) {
        return this.resync(GAP);
      }
    }
    return step({ control: [name, value] });
  }

  _sync(frame, position) {
    try {
      this._apply(frame, true);
    } catch (err) {
      if (!(err instanceof LocalFailure)) throw err;
      // A repair frame this copy cannot take: the hub's repair is wrong, not this copy.
      this.localErrors.push(`sync ${frame.type}: ${err.message}`.slice(0, 300));
      if (this.localErrors.length > 100) this.localErrors.shift();
      return step();
    }
    this.seq = position.seq;
    this.epoch = position.epoch ?? this.epoch;
    if (frame.type === "STATE_SNAPSHOT") {
      this.snapshots += 1;
      this.awaiting = null;
      this.partial = true;
    } else if (frame.type === "MESSAGES_SNAPSHOT") {
      this.partial = false;
    }
    return step({ applied: frame });
  }

  _applyLive(frame) {
    try {
      this._apply(frame, false);
    } catch (err) {
      if (!(err instanceof LocalFailure)) throw err;
      const asked = this.resync(PATCH_FAILED); // saying what was held before this event
      this._observe(frame);
      return asked;
    }
    this._observe(frame);
    return step({ applied: frame });
  }

  /**
   * Stop following live events and ask the hub for a repair (the returned step's `send`), saying
   * what this copy holds open so the repair ends and re-opens exactly the rest.
   */
  resync(reason) {
    this.awaiting = reason;
    this.resyncs[reason] = (this.resyncs[reason] ?? 0) + 1;
    const command = { type: "hub.resync", reason };
    const open = [...this.open];
    const ids = [this.runId ?? "", ...open];
    if (open.length <= MAX_HOLDING_ITEMS && ids.every((id) => id.length <= MAX_ID_LENGTH)) {
      command.holding = { run: this.runId, open };
    }
    return step({ send: [command] });
  }

  // -- test hooks -------------------------------------------------------------------------------

  /** Set the value at JSON Pointer `path` in the local state, to simulate a broken copy. */
  corrupt(path, value) {
    parsePointer(path);
    for (const op of ["replace", "add"]) {
      try {
        applyPatch(this.doc, [{ op, path, value }]);
        return;
      } catch (err) {
        if (!(err instanceof PatchFailed)) throw err;
      }
    }
    throw new Error(`cannot set ${path} in the local state`);
  }

  /** Silently drop the next `n` live sequenced events received, to simulate loss. */
  dropNext(n) {
    if (!(n >= 0)) throw new RangeError("n must be >= 0");
    this._drop += n;
  }

  // -- applying events --------------------------------------------------------------------------

  _apply(event, sync) {
    try {
      this._effect(event, event.type, sync);
    } catch (err) {
      if (err instanceof LocalFailure) throw err;
      if (err instanceof PatchFailed || err instanceof MalformedPatch || err instanceof TypeError) {
        throw new LocalFailure(err.message);
      }
      throw err;
    }
    if (sync) this._observeSync(event, event.type);
  }

  _effect(event, kind, sync) {
    switch (kind) {
      case "STATE_SNAPSHOT":
        if (!("snapshot" in event)) throw new LocalFailure("no 'snapshot'");
        this.doc.root = cloneJson(event.snapshot);
        return;
      case "STATE_DELTA":
        applyPatch(this.doc, checkPatch(event.delta).ops);
        return;
      case "MESSAGES_SNAPSHOT": {
        const list = need(event, "messages");
        if (!Array.isArray(list) || !list.every((m) => m && typeof m.id === "string")) {
          throw new LocalFailure("'messages' is not a list of messages");
        }
        break;
      }
      case "TEXT_MESSAGE_CONTENT":
      case "REASONING_MESSAGE_CONTENT":
        this._requireOpen(need(event, "messageId"));
        need(event, "delta");
        break;
      case "TOOL_CALL_ARGS":
        this._requireCall(need(event, "toolCallId"));
        need(event, "delta");
        break;
      default:
        if (!MESSAGE_EVENTS.has(kind)) return; // runs, steps, custom, raw: neither
    }
    // What the hub's thread does with it (hub/core/fold.py), as the official client does.
    fold(this.messages, event, kind in CHUNKS ? this._chunkTarget(event, sync) : null);
  }

  _requireOpen(messageId) {
    // The hub forwards content only for a message it has open; this copy must have it open too.
    if (!this.open.has(`text:${messageId}`) && !this.open.has(`reasoning:${messageId}`)) {
      throw new LocalFailure(`no open message '${messageId}'`);
    }
  }

  _requireCall(toolCallId) {
    // Open here, or held (a copy started from a saved position): the hub has it open.
    if (!this.open.has(`tool:${toolCallId}`) && this.messages.toolCall(toolCallId) === undefined) {
      throw new LocalFailure(`no tool call '${toolCallId}'`);
    }
  }

  // -- what is streaming ------------------------------------------------------------------------

  /** Follow a live event the hub sent, applied or not (as the hub's ConsumerView.observe). */
  _observe(event) {
    const kind = event.type;
    if (kind in CHUNKS) {
      const [item, idField] = CHUNKS[kind];
      let target;
      try {
        target = this._lane(item, event[idField], event.subagentRunId);
      } catch (err) {
        if (err instanceof LocalFailure) return; // the hub took it: this copy went wrong
        throw err;
      }
      const [owner, key, opens] = target;
      if (opens) this._openLane(owner, key);
      return;
    }
    if (this.lanes.size > 0) this._settle(kind, event);
    if (kind === "RUN_FINISHED" || kind === "RUN_ERROR") {
      this.open.clear();
      this.runId = null;
    } else if (kind === "RUN_STARTED") {
      this.runId = event.runId ?? null;
    } else if (STARTS.has(kind)) {
      const item = STARTS.get(kind);
      this.open.add(`${item}:${event[FOLLOWED[item][3]]}`);
    } else if (ENDS.has(kind)) {
      const item = ENDS.get(kind);
      this.open.delete(`${item}:${event[FOLLOWED[item][3]]}`);
    }
  }

  /**
   * Follow a repair frame: ends, the run's end and start, snapshots, then the re-opened items
   * (start + content so far, and one chunk per lane carrying its content so far). The frames are
   * a stream the official client takes as it is, so they follow the live rules: the snapshots
   * close every lane this copy held, and each re-opening chunk opens its item in its lane.
   */
  _observeSync(event) {
    this._observe(event);
  }

  /** What an event that is not a chunk does to the lanes: closes its agent's, every one, or none. */
  _settle(kind, event) {
    if (CLOSES_ALL_LANES.has(kind)) {
      for (const key of this.lanes.values()) this.open.delete(key);
      this.lanes.clear();
    } else if (CLOSES_OWN_LANE.has(kind)) {
      const tag = event.subagentRunId ?? null;
      if (tag === null && SUBAGENT_ENDS.has(kind)) return; // names no subagent: not the parent's
      this._closeLane(tag);
    }
  }

  _closeLane(owner) {
    const key = this.lanes.get(owner);
    if (key === undefined) return;
    this.lanes.delete(owner);
    this.open.delete(key);
  }

  _openLane(owner, key) {
    this._closeLane(owner);
    this.lanes.set(owner, key);
    this.open.add(key);
  }

  /**
   * `[owner, key, opens]`: the lane a chunk of `item` naming `itemId` (absent: none) tagged `tag`
   * streams in, its item, and whether it closes the lane's item and opens its own (hub/core/
   * streaming.py Streaming.chunk_target). Throws LocalFailure for a chunk that lane rules refuse.
   */
  _lane(item, itemId, tag) {
    const prefix = `${item}:`;
    tag = tag ?? null;
    if (itemId !== undefined && itemId !== null) {
      const key = prefix + itemId;
      for (const [owner, held] of this.lanes) {
        if (held !== key) continue;
        if (tag !== null && tag !== owner) {
          throw new LocalFailure(`a chunk tagged '${tag}' for '${itemId}', which another lane streams into`);
        }
        return [owner, key, false];
      }
      return [tag, key, true];
    }
    let lane = tag;
    if (tag === null) {
      const parent = this.lanes.get(null);
      if (parent === undefined || !parent.startsWith(prefix)) {
        const takers = [...this.lanes].filter(([, held]) => held.startsWith(prefix));
        if (takers.length > 1) throw new LocalFailure(`a ${item} chunk more than one lane could take`);
        lane = takers.length === 1 ? takers[0][0] : null;
      }
    }
    const current = this.lanes.get(lane);
    if (current === undefined || !current.startsWith(prefix)) {
      throw new LocalFailure(`a ${item} chunk without an id continues nothing`);
    }
    return [lane, current, false];
  }

  /**
   * `[itemId, opens]`: the item a chunk streams into, and whether it opens (or re-opens) it. A
   * sync chunk re-opens an item with its content so far: it always opens it.
   */
  _chunkTarget(event, sync) {
    const [item, idField] = CHUNKS[event.type];
    const [, key, opens] = this._lane(item, event[idField], event.subagentRunId);
    if ((sync || opens) && item === "tool" && (event.toolCallName ?? null) === null) {
      throw new LocalFailure("the first TOOL_CALL_CHUNK of a call needs toolCallName");
    }
    return [key.slice(item.length + 1), sync || opens];
  }
}
