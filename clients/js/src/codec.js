// The two encodings of hub frames: JSON in text frames, msgpack in binary frames (subprotocol
// agui-hub.msgpack), as hub/wire/codec.py defines them. The msgpack library is loaded on first
// use only, so a JSON client never downloads it.

/** The WebSocket subprotocol a client offers to get binary msgpack frames. */
export const MSGPACK_SUBPROTOCOL = "agui-hub.msgpack";
export const ENCODINGS = ["json", "msgpack"];

/** A frame that is not one JSON/msgpack object. */
export class FrameError extends Error {
  name = "FrameError";
}

let vendored = null;

/**
 * The msgpack implementation: `{encode, decode}`. The vendored @msgpack/msgpack is imported
 * (relative to this module) the first time; pass your own to skip that.
 */
export async function loadMsgpack() {
  vendored ??= import("../vendor/msgpack/index.mjs").then((m) => ({ encode: m.encode, decode: m.decode }));
  return vendored;
}

export function checkEncoding(encoding) {
  if (!ENCODINGS.includes(encoding)) {
    throw new TypeError(`encoding must be 'json' or 'msgpack', not ${JSON.stringify(encoding)}`);
  }
  return encoding;
}

/** One object as a frame: a string (JSON) or a Uint8Array (msgpack, given its `{encode}`). */
export function encodeFrame(obj, encoding, msgpack) {
  if (encoding === "msgpack") {
    if (!msgpack) throw new Error("msgpack is not loaded: await loadMsgpack() first");
    return msgpack.encode(obj);
  }
  return JSON.stringify(obj);
}

/** Decode one frame: a string is JSON, binary data is msgpack. It must hold one object. */
export function decodeFrame(data, msgpack) {
  let obj;
  if (typeof data === "string") {
    try {
      obj = JSON.parse(data);
    } catch {
      throw new FrameError("the frame is not valid JSON");
    }
  } else {
    const bytes = asBytes(data);
    if (bytes === null) throw new FrameError(`cannot decode a frame of type ${typeName(data)}`);
    if (!msgpack) throw new FrameError("a binary frame, but msgpack is not loaded");
    try {
      obj = msgpack.decode(bytes);
    } catch {
      throw new FrameError("the frame is not valid msgpack");
    }
  }
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) {
    throw new FrameError("a frame must hold one object");
  }
  return obj;
}

function asBytes(data) {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (Array.isArray(data) && data.every((d) => d instanceof Uint8Array)) {
    // The ws package's "fragments" binary type.
    const out = new Uint8Array(data.reduce((n, d) => n + d.byteLength, 0));
    let at = 0;
    for (const d of data) {
      out.set(d, at);
      at += d.byteLength;
    }
    return out;
  }
  return null;
}

function typeName(value) {
  return value === null ? "null" : (value?.constructor?.name ?? typeof value);
}
