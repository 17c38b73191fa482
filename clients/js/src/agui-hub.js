// agui-hub browser/Node client. Import straight from a <script type="module">, no build step:
//
//   import { HubClient } from "/js/src/agui-hub.js";
//   const hub = new HubClient({ thread: "doc-1" });
//   hub.on("state", (state) => render(state));
//
// Its only dependencies are vendored next to it (../vendor/): fast-json-patch and, loaded on
// first use by a msgpack client, @msgpack/msgpack. See ../README.md.

export { HubClient, CLOSE_RECONNECT, TOKEN_PARAM, TRANSPORTS } from "./client.js";
export { EventStream, eventsUrl, httpUrl } from "./sse.js";
export { threadUrl, THREAD_ID } from "./url.js";
export { Emitter } from "./emitter.js";
export { Mirror, LocalFailure, hubControl, positionOf, STREAMING, GAP, PATCH_FAILED } from "./mirror.js";
export { MessageLog, reconcile, CLIENT_SIDE_ROLES } from "./messages.js";
export {
  applyPatch,
  checkPatch,
  cloneJson,
  jsonEqual,
  parsePointer,
  formatPointer,
  valueAt,
  MalformedPatch,
  PatchFailed,
} from "./patch.js";
export { backoffDelay, backoffOptions, DEFAULT_BACKOFF } from "./backoff.js";
export { decodeFrame, encodeFrame, loadMsgpack, FrameError, MSGPACK_SUBPROTOCOL } from "./codec.js";
export { testOps } from "./edits.js";
export { HubRunError, InterruptResolvedError, hubRunError, runCommand } from "./runs.js";
export { HttpRuns } from "./http-runs.js";
