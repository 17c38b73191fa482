// Test support: real AG-UI HTTP agents on 127.0.0.1 for a hub to call (`--agent NAME=URL`).
// One node:http server whose paths are scripted behaviours; each run's RunAgentInput is
// recorded, and replies are encoded with the official SDK's EventEncoder (@ag-ui/encoder).

import http from "node:http";

import { EventEncoder } from "@ag-ui/encoder";

const encoder = new EventEncoder();

const started = (input) => ({ type: "RUN_STARTED", threadId: input.threadId, runId: input.runId });
const finished = (input) => ({ type: "RUN_FINISHED", threadId: input.threadId, runId: input.runId });

/** Each script: (input, agent) -> an async iterable of events (or raw SSE strings). */
const SCRIPTS = {
  /**
   * Answers the last user message (`You said “...”`, streamed in two chunks), counting its runs
   * in the state it is given, and keeps the thread's messages plus its reply.
   */
  async *echo(input) {
    yield started(input);
    const runs = Number(input.state?.runs ?? 0) + 1;
    yield runs === 1
      ? { type: "STATE_SNAPSHOT", snapshot: { runs: 1 } }
      : { type: "STATE_DELTA", delta: [{ op: "replace", path: "/runs", value: runs }] };
    const last = input.messages.at(-1);
    const text = last?.role === "user" ? String(last.content) : "(nothing to answer)";
    const id = `reply-${input.runId}`;
    yield { type: "TEXT_MESSAGE_START", messageId: id, role: "assistant" };
    yield { type: "TEXT_MESSAGE_CONTENT", messageId: id, delta: "You said " };
    yield { type: "TEXT_MESSAGE_CONTENT", messageId: id, delta: `“${text}”` };
    yield { type: "TEXT_MESSAGE_END", messageId: id };
    yield finished(input);
  },
  /**
   * Human in the loop (AG-UI 1.0): a run without `resume` ends asking (RUN_FINISHED outcome
   * interrupt, interrupt `approve-{threadId}`); one with `resume` says what it was answered.
   */
  async *ask(input) {
    yield started(input);
    if (!input.resume?.length) {
      const interrupt = { id: `approve-${input.threadId}`, reason: "approval", message: "ok?" };
      yield { ...finished(input), outcome: { type: "interrupt", interrupts: [interrupt] } };
      return;
    }
    const said = input.resume.map((r) => `${r.interruptId}=${r.status}:${JSON.stringify(r.payload)}`);
    const id = `answer-${input.runId}`;
    yield { type: "TEXT_MESSAGE_START", messageId: id, role: "assistant" };
    yield { type: "TEXT_MESSAGE_CONTENT", messageId: id, delta: `answered ${said.join(", ")}` };
    yield { type: "TEXT_MESSAGE_END", messageId: id };
    yield finished(input);
  },
  /** Starts the run, then keeps the stream alive with comments until the hub closes it. */
  async *hold(input) {
    yield started(input);
    for (;;) {
      await new Promise((r) => setTimeout(r, 50));
      yield ": still working\n\n";
    }
  },
};

export class AgentServer {
  constructor(scripts = SCRIPTS) {
    this.scripts = scripts;
    /** Every RunAgentInput received, in order. */
    this.inputs = [];
    /** Run ids whose request the hub closed before the answer ended (a cancel). */
    this.closed = [];
    this.server = http.createServer((req, res) => this._serve(req, res));
    this.sockets = new Set();
    this.server.on("connection", (socket) => {
      this.sockets.add(socket);
      socket.on("close", () => this.sockets.delete(socket));
    });
  }

  async start() {
    await new Promise((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.port = this.server.address().port;
    return this;
  }

  url(script) {
    return `http://127.0.0.1:${this.port}/${script}`;
  }

  /** Wait until a request for `runId` has arrived. */
  async got(runId, timeout = 10_000) {
    const deadline = Date.now() + timeout;
    while (!this.inputs.some((i) => i.runId === runId)) {
      if (Date.now() > deadline) throw new Error(`the agent never got run ${runId}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    return this.inputs.find((i) => i.runId === runId);
  }

  async close() {
    for (const socket of this.sockets) socket.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }

  async _serve(req, res) {
    const script = this.scripts[new URL(req.url, "http://x").pathname.slice(1)];
    if (req.method !== "POST" || script === undefined) {
      res.writeHead(404).end();
      return;
    }
    let body = "";
    for await (const chunk of req) body += chunk;
    const input = JSON.parse(body);
    this.inputs.push(input);
    res.writeHead(200, { "content-type": encoder.getContentType(), "cache-control": "no-cache" });
    let gone = false;
    res.on("close", () => {
      if (!res.writableEnded) {
        gone = true;
        this.closed.push(input.runId);
      }
    });
    for await (const event of script(input, this)) {
      if (gone) return;
      res.write(typeof event === "string" ? event : encoder.encode(event));
    }
    res.end();
  }
}
