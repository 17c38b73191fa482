#!/usr/bin/env node
// Runs the OFFICIAL @ag-ui/client HttpAgent against a real AG-UI endpoint (the hub's
// POST /v1/agents/{NAME}), one agent object for several runs, as one browser tab would:
// each run may first add messages (agent.addMessage), then `await agent.runAgent()`.
//
// stdin : {"url": "...", "threadId": "...", "headers": {...}?, "initialState": {...}?,
//          "initialMessages": [...]?, "timeoutMs": 20000?,
//          "runs": [{"runId": "..."?, "addMessages": [...]?, "url": "..."?}, ...]}
// A run's "url" points the same agent object somewhere else from that run on (a tab that
// switches agents on one thread).
// stdout: one JSON line
//   {"runs": [{"ok": true|false, "error": "<message>"?, "errorName": "..."?,
//              "events": [<every event the client applied, as its subscriber saw it>],
//              "runErrors": [{"message", "code"}], "failed": [<onRunFailed error messages>],
//              "newMessages": [...]?, "input": {<the RunAgentInput the client sent>},
//              "state": ..., "messages": [...]}, ...],
//    "state": ..., "messages": [...], "warnings": [...]}
// "state"/"messages" per run are what the agent object holds right after that run settled
// (resolved or rejected); the top-level ones after the last run. "warnings" collects what the
// client wrote via console.warn/error (e.g. fields it stripped, its "Agent execution failed").
//
// Exit code 0 whenever the runs were attempted (whatever they ended with); non-zero only for
// harness problems (bad stdin). Every run is bounded by "timeoutMs" (default 20000): a run
// that does not settle by then is aborted and reported with error "timeout".

const warnings = [];
const fmt = (args) =>
  args
    .map((a) => {
      if (a instanceof Error) return a.message;
      if (typeof a === "string") return a;
      try {
        return JSON.stringify(a);
      } catch {
        return String(a);
      }
    })
    .join(" ");
console.warn = (...args) => warnings.push(fmt(args));
console.error = (...args) => warnings.push(fmt(args));
console.log = (...args) => warnings.push(fmt(args)); // stdout is for the verdict only
console.info = console.debug = () => {};

const readStdin = async () => {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
};

let request;
try {
  request = JSON.parse(await readStdin());
} catch (e) {
  process.stderr.write(`http_agent.mjs: stdin is not valid JSON: ${e.message}\n`);
  process.exit(2);
}
if (
  !request ||
  typeof request !== "object" ||
  typeof request.url !== "string" ||
  typeof request.threadId !== "string" ||
  !Array.isArray(request.runs)
) {
  process.stderr.write('http_agent.mjs: stdin needs "url", "threadId" and a "runs" array\n');
  process.exit(2);
}

const { HttpAgent } = await import("@ag-ui/client");

const clone = (value) => (value === undefined ? undefined : structuredClone(value));

// The request the client sent, recorded by wrapping its own fetch (the real global fetch).
const sent = [];
const agent = new HttpAgent({
  url: request.url,
  threadId: request.threadId,
  headers: request.headers ?? {},
  initialState: request.initialState ?? undefined,
  initialMessages: request.initialMessages ?? undefined,
  fetch: (url, init) => {
    try {
      sent.push(JSON.parse(init.body));
    } catch {
      sent.push(null);
    }
    return fetch(url, init);
  },
});

let current = null;
agent.subscribe({
  onEvent: ({ event }) => {
    current?.events.push(clone(event));
  },
  onRunErrorEvent: ({ event }) => {
    current?.runErrors.push({ message: event.message, code: event.code });
  },
  onRunFailed: ({ error }) => {
    current?.failed.push(error instanceof Error ? error.message : String(error));
  },
});

const timeoutMs = Number(request.timeoutMs ?? 20000);
const results = [];
for (const run of request.runs) {
  current = { events: [], runErrors: [], failed: [] };
  if (typeof run.url === "string") agent.url = run.url;
  for (const message of run.addMessages ?? []) agent.addMessage(clone(message));
  const before = sent.length;
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => {
      agent.abortRun();
      reject(Object.assign(new Error("timeout"), { name: "HarnessTimeout" }));
    }, timeoutMs);
  });
  try {
    const { newMessages } = await Promise.race([
      agent.runAgent(run.runId ? { runId: run.runId } : undefined),
      timeout,
    ]);
    current.ok = true;
    current.newMessages = newMessages;
  } catch (err) {
    current.ok = false;
    current.error = err instanceof Error ? err.message : String(err);
    current.errorName = err instanceof Error ? err.name : typeof err;
  } finally {
    clearTimeout(timer);
  }
  current.input = sent.length > before ? sent[sent.length - 1] : null;
  current.state = clone(agent.state);
  current.messages = clone(agent.messages);
  results.push(current);
  current = null;
  if (results[results.length - 1].errorName === "HarnessTimeout") break;
}

process.stdout.write(
  JSON.stringify({
    runs: results,
    state: clone(agent.state),
    messages: clone(agent.messages),
    warnings,
  }) + "\n",
);
process.exit(0);
