// A small page on CopilotKit's React package (@copilotkit/react-core/v2): its provider pointed
// at the runtime that serves the page (`/api`), one agent on the thread named in `?thread=`,
// connected on load (CopilotKit's connect: the thread's history, or its open run from its start
// and then live), and a send button that runs it. It shows the thread's messages as the agent
// holds them. Bundled with esbuild by copilotkit-page.test.mjs.

import React, { useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { CopilotKitProvider, useAgent, useCopilotKit } from "@copilotkit/react-core/v2";

const thread = new URLSearchParams(location.search).get("thread");
/** What the test reads besides the DOM: connects made, errors. */
const status = (window.__status = { connects: 0, connected: 0, errors: [] });

function Chat() {
  const { agent, isReady } = useAgent({ agentId: "page", runtimeAgentId: "default", threadId: thread });
  const { copilotkit } = useCopilotKit();
  const [running, setRunning] = useState(false);

  useEffect(() => {
    if (!isReady) return;
    status.connects++;
    copilotkit.connectAgent({ agent }).then(
      () => status.connected++,
      (err) => status.errors.push(`connect: ${err?.message ?? err}`),
    );
    const sub = agent.subscribe({
      onRunInitialized: () => setRunning(true),
      onRunFinalized: () => setRunning(false),
      onRunFailed: () => setRunning(false),
    });
    return () => sub.unsubscribe();
  }, [agent, isReady, copilotkit]);

  const send = (event) => {
    const words = Number(event.currentTarget.dataset.words);
    agent.addMessage({ id: `u-${Date.now()}`, role: "user", content: `Stream ${words} words` });
    copilotkit
      .runAgent({ agent, forwardedProps: { words, step: 75 } })
      .catch((err) => status.errors.push(`run: ${err?.message ?? err}`));
  };

  return (
    <main data-ready={String(isReady)} data-running={String(running || agent.isRunning)}>
      <button type="button" data-testid="send" data-words="40" onClick={send} disabled={!isReady}>
        Send
      </button>
      <ol data-testid="messages">
        {agent.messages.map((m) => (
          <li key={m.id} data-testid="message" data-id={m.id} data-role={m.role}>
            {typeof m.content === "string" ? m.content : ""}
          </li>
        ))}
      </ol>
      <pre data-testid="state">{JSON.stringify(agent.state ?? {})}</pre>
    </main>
  );
}

createRoot(document.getElementById("root")).render(
  <CopilotKitProvider runtimeUrl="/api" showDevConsole={false}>
    <Chat />
  </CopilotKitProvider>,
);
