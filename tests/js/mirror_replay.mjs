// Feeds streams the hub sent to the browser client's Mirror (clients/js/src/mirror.js) and
// checks it holds the hub's state and messages where each stream says (tests/mirror_streams.py).
// Reads one JSON document on stdin: {cases: [{name, frames, checks: [[index, seq]], views:
// {seq: {state, messages}}}]}; prints one JSON line: {judged, failures: [...]} (the first
// failure of each case: where, and what the copy held against what it had to).
import { isDeepStrictEqual } from "node:util";

import { Mirror } from "../../clients/js/src/mirror.js";

function byId(messages) {
  return Object.fromEntries(messages.map((m) => [m.id, m]));
}

function judge({ name, frames, checks, views, ordered }) {
  const mirror = new Mirror();
  const at = new Map(checks);
  for (const [index, frame] of frames.entries()) {
    const step = mirror.receive(frame);
    const where = { name, index, type: frame.type };
    if (step.send.length) return { ...where, asked: step.send };
    if (mirror.localErrors.length) return { ...where, localErrors: mirror.localErrors };
    const seq = at.get(index);
    if (seq === undefined) continue;
    const want = views[String(seq)];
    const held = JSON.parse(JSON.stringify({ state: mirror.state, messages: mirror.messages.items }));
    const same =
      mirror.seq === seq &&
      isDeepStrictEqual(held.state, want.state) &&
      (ordered
        ? isDeepStrictEqual(held.messages, want.messages)
        : held.messages.length === want.messages.length &&
          isDeepStrictEqual(byId(held.messages), byId(want.messages)));
    if (!same) return { ...where, seq, held, want, heldSeq: mirror.seq };
  }
  return null;
}

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { cases } = JSON.parse(input);
const failures = cases.map(judge).filter((f) => f !== null);
const line = JSON.stringify({ judged: cases.length, failures }) + "\n";
process.stdout.write(line, () => process.exit(0));
