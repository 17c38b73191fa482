// Test support: an AG-UI agent for CopilotKit runtimes that streams a text reply word by word,
// a state delta per word, and a tool call, `step` ms apart. What it does is read from the run's
// forwardedProps (the browser sets them, so one runtime process serves every test):
//   {words: N, step: MS, hangAfter: K}  K words, then nothing until the run is aborted.

import { AbstractAgent } from "@ag-ui/client";
import { Observable } from "rxjs";

export const WORDS = ["Hello", "from", "the", "hub", "and", "every", "runtime", "that", "serves", "it"];

/** The text of a reply of `n` words (the words repeat). */
export function replyText(n) {
  return Array.from({ length: n }, (_, i) => WORDS[i % WORDS.length]).join(" ");
}

/** The whole script of a run: what the agent sends, in order. */
export function script(input) {
  const { words = 6 } = input.forwardedProps ?? {};
  const m = `reply-${input.runId}`;
  const t = `tool-${input.runId}`;
  const events = [
    { type: "RUN_STARTED", threadId: input.threadId, runId: input.runId },
    { type: "STATE_SNAPSHOT", snapshot: { doc: { title: "Draft" }, words: 0 } },
    { type: "TEXT_MESSAGE_START", messageId: m, role: "assistant" },
  ];
  for (let i = 0; i < words; i++) {
    events.push({ type: "TEXT_MESSAGE_CONTENT", messageId: m, delta: (i ? " " : "") + WORDS[i % WORDS.length] });
    events.push({ type: "STATE_DELTA", delta: [{ op: "replace", path: "/words", value: i + 1 }] });
  }
  events.push(
    { type: "TEXT_MESSAGE_END", messageId: m },
    { type: "TOOL_CALL_START", toolCallId: t, toolCallName: "set_title", parentMessageId: m },
    { type: "TOOL_CALL_ARGS", toolCallId: t, delta: '{"title":' },
    { type: "TOOL_CALL_ARGS", toolCallId: t, delta: '"Streamed"}' },
    { type: "TOOL_CALL_END", toolCallId: t },
    { type: "STATE_DELTA", delta: [{ op: "replace", path: "/doc/title", value: "Streamed" }] },
    { type: "RUN_FINISHED", threadId: input.threadId, runId: input.runId },
  );
  return events;
}

export class StreamingAgent extends AbstractAgent {
  run(input) {
    const { step = 20, hangAfter = null } = input.forwardedProps ?? {};
    return new Observable((subscriber) => {
      let over = false;
      const timers = new Set();
      const wait = (ms) => new Promise((res) => timers.add(setTimeout(res, ms)));
      this._abort = () => {
        if (over) return;
        over = true;
        const err = new Error("the run was aborted");
        err.name = "AbortError";
        subscriber.error(err);
      };
      (async () => {
        let words = 0;
        for (const event of script(input)) {
          if (event.type === "TEXT_MESSAGE_CONTENT" && hangAfter !== null && words === hangAfter) {
            await new Promise(() => {}); // hangs until aborted (or the process dies)
          }
          await wait(step);
          if (over) return;
          if (event.type === "TEXT_MESSAGE_CONTENT") words++;
          subscriber.next(event);
        }
        over = true;
        subscriber.complete();
      })();
      return () => {
        over = true;
        for (const timer of timers) clearTimeout(timer);
      };
    });
  }

  abortRun() {
    this._abort?.();
  }
}
