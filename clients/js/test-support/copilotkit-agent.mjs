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

/**
 * A run that plays `events` in order as an agent's Observable: `before(event, i)` is awaited
 * ahead of each (a delay, a pause), `sent(event)` sees each one sent; `agent.abortRun()` (through
 * `agent._abort`) ends it with an AbortError, as a real agent's aborted request does.
 */
export function played(agent, events, { before, sent = () => {}, teardown = () => {} }) {
  return new Observable((subscriber) => {
    let over = false;
    agent._abort = () => {
      if (over) return;
      over = true;
      const err = new Error("the run was aborted");
      err.name = "AbortError";
      subscriber.error(err);
    };
    (async () => {
      for (const [i, event] of events.entries()) {
        await before(event, i);
        if (over) return;
        sent(event);
        subscriber.next(event);
      }
      over = true;
      subscriber.complete();
    })();
    return () => {
      over = true;
      teardown();
    };
  });
}

export class StreamingAgent extends AbstractAgent {
  run(input) {
    const { step = 20, hangAfter = null } = input.forwardedProps ?? {};
    const timers = new Set();
    let words = 0;
    return played(this, script(input), {
      before: async (event) => {
        if (event.type === "TEXT_MESSAGE_CONTENT" && hangAfter !== null && words === hangAfter) {
          await new Promise(() => {}); // hangs until aborted (or the process dies)
        }
        await new Promise((res) => timers.add(setTimeout(res, step)));
      },
      sent: (event) => {
        if (event.type === "TEXT_MESSAGE_CONTENT") words++;
      },
      teardown: () => {
        for (const timer of timers) clearTimeout(timer);
      },
    });
  }

  abortRun() {
    this._abort?.();
  }
}
