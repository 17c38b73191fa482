#!/usr/bin/env node
// Replays a stream of AG-UI events through the OFFICIAL @ag-ui/client pipeline
// (AbstractAgent.runAgent: enforceEvents -> transformChunks -> verifyEvents ->
// defaultApplyEvents) and reports what the agent object holds afterwards.
//
// stdin : {"events": [...], "initialState": {...}|null, "initialMessages": [...]}
//         or {"batch": [<such requests>...]}: each replayed by its own agent, in order
// stdout: one JSON line (for a batch: {"results": [<one verdict per request>]})
//   {"ok": true,  "state": ..., "messages": [...], "newMessages": [...],
//    "runErrors": [...], "warnings": [...]}
//   {"ok": false, "error": "<message>", "runErrors": [...], "warnings": [...]}
// No state/messages on failure: verification runs synchronously ahead of the
// (async) reducer, so what the agent holds after a rejection is not a stable
// prefix of the stream. "runErrors" lists the messages of RUN_ERROR events the client
// applied (a RUN_ERROR is a *valid* event, so runAgent still resolves).
// "warnings" collects everything the client wrote via console.warn/error
// (e.g. "[ag-ui][enforce] Removed unrecognised material at '/foo' ...");
// on failure it also holds the client's "Agent execution failed: ..." line.
//
// Exit code 0 whenever a verdict was produced (accepted or rejected);
// non-zero only for harness problems (bad stdin, attempted network access).

import net from "node:net";
import tls from "node:tls";
import http from "node:http";
import https from "node:https";
import dns from "node:dns";

// ---------------------------------------------------------------------------
// 1. No network: replace every outbound entry point with a recorder that
//    throws. The AbstractAgent subclass below never needs the network; if
//    anything tries, the harness reports it and exits non-zero.
// ---------------------------------------------------------------------------
const networkAttempts = [];
const denyNetwork = (what) =>
  function () {
    networkAttempts.push(what);
    throw new Error(`replay.mjs: network access attempted (${what})`);
  };
globalThis.fetch = denyNetwork("fetch");
globalThis.WebSocket = denyNetwork("WebSocket");
globalThis.EventSource = denyNetwork("EventSource");
net.connect = net.createConnection = denyNetwork("net.connect");
net.Socket.prototype.connect = denyNetwork("net.Socket.connect");
tls.connect = denyNetwork("tls.connect");
http.request = http.get = denyNetwork("http.request");
https.request = https.get = denyNetwork("https.request");
dns.lookup = denyNetwork("dns.lookup");

// ---------------------------------------------------------------------------
// 2. Capture the client's console diagnostics instead of letting them leak
//    onto stdout/stderr; they are returned as "warnings".
// ---------------------------------------------------------------------------
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
console.log = (...args) => warnings.push(fmt(args)); // keep stdout for the verdict only
console.info = console.debug = () => {};

// Written, then exit once the pipe took it all: process.exit() right after a large write to a
// pipe would cut the line (a batch's verdicts run to megabytes).
const writeResultAndExit = (obj, code) =>
  process.stdout.write(JSON.stringify(obj) + "\n", () => process.exit(code));

const readStdin = async () => {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
};

let request;
try {
  request = JSON.parse(await readStdin());
} catch (e) {
  process.stderr.write(`replay.mjs: stdin is not valid JSON: ${e.message}\n`);
  process.exit(2);
}
const isRequest = (r) => r && typeof r === "object" && Array.isArray(r.events);
const batch = request && Array.isArray(request.batch) ? request.batch : null;
if (batch ? !batch.every(isRequest) : !isRequest(request)) {
  process.stderr.write(
    'replay.mjs: stdin must be an object with an "events" array, or a "batch" of them\n',
  );
  process.exit(2);
}

// Imported after the network guards are in place.
const { AbstractAgent } = await import("@ag-ui/client");
const { Observable } = await import("rxjs");

class ReplayAgent extends AbstractAgent {
  constructor(config, events) {
    super(config);
    this.replayEvents = events;
  }

  // Emits exactly the given events, in order, then completes.
  run(_input) {
    const events = this.replayEvents;
    return new Observable((subscriber) => {
      for (const event of events) {
        if (subscriber.closed) return;
        subscriber.next(structuredClone(event));
      }
      subscriber.complete();
    });
  }
}

// One request replayed by a fresh agent: its verdict, with the warnings it caused.
const replayOne = async (request) => {
  warnings.length = 0;
  const agent = new ReplayAgent(
    {
      agentId: "agui-hub-replay",
      threadId: request.threadId ?? "agui-hub-replay-thread",
      initialState: request.initialState ?? undefined,
      initialMessages: request.initialMessages ?? undefined,
    },
    request.events,
  );

  const runErrors = [];
  const subscriber = {
    onRunErrorEvent: ({ event }) => {
      runErrors.push(event.message);
    },
  };

  const started = process.hrtime.bigint();
  let verdict;
  try {
    const { newMessages } = await agent.runAgent({ runId: request.runId ?? undefined }, subscriber);
    verdict = {
      ok: true,
      state: agent.state,
      messages: agent.messages,
      newMessages,
    };
  } catch (err) {
    verdict = {
      ok: false,
      error: err instanceof Error ? err.message : String(err),
    };
  }
  verdict.runErrors = runErrors;
  verdict.warnings = [...warnings];
  verdict.elapsedMs = Number(process.hrtime.bigint() - started) / 1e6;
  return verdict;
};

let output;
if (batch) {
  const results = [];
  for (const one of batch) results.push(await replayOne(one));
  output = { results };
} else {
  output = await replayOne(request);
}

if (networkAttempts.length > 0) {
  process.stderr.write(`replay.mjs: network access attempted: ${networkAttempts.join(", ")}\n`);
  writeResultAndExit(output, 3);
} else {
  writeResultAndExit(output, 0);
}
