// The document page's message box: a person's message becomes a run of the demo agent.
//
// The page asks the hub (HubClient.run, `hub.run`) to run the agent named `demo` with the
// message; the hub adds the message to the thread, posts the thread's state and messages to the
// agent (a real AG-UI HTTP endpoint), and publishes what the agent streams back: its reply
// (TEXT_MESSAGE_*) and any edit of the state reach every tab on the thread, this one included,
// through the same events as everything else. One run at a time per thread: while another is
// open (the demo's clock starts a short writing step every interval, someone else may be asking)
// the hub answers `run_in_progress`, and this page asks again shortly, for a while.

import { byTestId, renderMessages } from "./common.js";

/** The hub's name for the demo agent (`agui-hub demo` configures it). */
export const AGENT = "demo";
/** Messages whose id starts with this are the agent's notes about its writing steps. */
const NOTE = "note-";
/** How long to keep asking while another run is open, and how often (ms). */
const BUSY_FOR_MS = 15_000;
const BUSY_RETRY_MS = 150;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A fresh message id (randomUUID needs a secure context: not every hub address is one). */
function messageId() {
  const random = globalThis.crypto?.randomUUID?.() ?? `${Date.now().toString(36)}-${Math.random()}`.slice(2);
  return `user-${random}`;
}

/**
 * Wire the message box to `client`; returns `render(client)`, which draws the conversation and
 * the notes. Test hook: the status line's `data-state` (`idle`, `sending`, `waiting`,
 * `answering`, `failed`) and `data-run-id` (the run this tab started last).
 */
export function askBox(client) {
  const form = byTestId("ask-form");
  const input = byTestId("ask-input");
  const send = byTestId("ask-send");
  const stop = byTestId("ask-stop");
  const status = byTestId("ask-status");
  const conversation = byTestId("conversation");
  const notes = byTestId("messages");
  let mine = null; // the run this tab started, while it is open
  let sending = false;

  const say = (state, text, runId) => {
    status.dataset.state = state;
    if (runId !== undefined) status.dataset.runId = runId;
    status.textContent = text;
  };
  const refreshButtons = () => {
    if (client.status === "open") input.disabled = false; // once joined, typing is always fine
    send.disabled = sending || input.disabled;
    stop.disabled = mine === null || client.mirror.runId !== mine;
  };

  async function ask(text) {
    const message = { id: messageId(), role: "user", content: text };
    const deadline = Date.now() + BUSY_FOR_MS;
    say("sending", "Sending…");
    for (;;) {
      try {
        const { runId } = await client.run(AGENT, [message]);
        mine = runId;
        say("answering", "The agent is answering, in every tab.", runId);
        return true;
      } catch (err) {
        if (err?.code === "run_in_progress" && Date.now() < deadline) {
          say("waiting", "Another run is open; asking again in a moment…");
          await sleep(BUSY_RETRY_MS);
          continue;
        }
        const why = err?.code === "run_in_progress" ? "the agent stayed busy" : (err?.code ?? String(err));
        say("failed", `Not sent (${why}): your message is back in the box.`);
        return false;
      }
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = input.value.trim();
    if (text === "" || sending) return;
    sending = true;
    input.value = "";
    refreshButtons();
    try {
      if (!(await ask(text)) && input.value === "") input.value = text;
    } finally {
      sending = false;
      refreshButtons();
    }
  });
  stop.addEventListener("click", async () => {
    if (mine === null) return;
    try {
      await client.cancel(mine);
      say("idle", "Stopped.");
    } catch (err) {
      say("failed", `Could not stop it (${err?.code ?? err}).`);
    }
    refreshButtons();
  });
  client.on("status", refreshButtons);
  client.on("event", (event) => {
    const ended = event.type === "RUN_FINISHED" || event.type === "RUN_ERROR";
    if (ended && mine !== null && client.mirror.runId === null) {
      // One run at a time: the run that just ended is this tab's.
      if (event.type === "RUN_FINISHED") say("idle", "Answered.");
      else say("failed", `The run ended: ${event.code ?? "error"}.`);
      mine = null;
    }
    refreshButtons();
  });
  say("idle", status.textContent.trim());

  return (c) => {
    refreshButtons();
    const isNote = (m) => typeof m.id === "string" && m.id.startsWith(NOTE);
    renderMessages(conversation, c.messages.filter((m) => !isNote(m)), 12);
    renderMessages(notes, c.messages.filter(isNote), 4);
  };
}
