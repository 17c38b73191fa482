// Test support: a real hub process on a free loopback port, an agent (producer) speaking the
// agent endpoint, and the hub's view of a thread over HTTP.

import { spawn } from "node:child_process";
import http from "node:http";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import WebSocket from "ws";

const HERE = dirname(fileURLToPath(import.meta.url));
/** The repository root (clients/js/test-support -> ../../..). */
export const ROOT = resolve(HERE, "../../..");
/** The hub's CLI: AGUI_HUB_BIN, or the project's venv. */
export const HUB_BIN = process.env.AGUI_HUB_BIN ?? join(ROOT, ".venv", "bin", "agui-hub");
const LISTENING = /listening on ws:\/\/127\.0\.0\.1:(\d+)/;

/**
 * Why hub tests cannot run here, or null. Outside CI a missing hub skips them; under CI=true
 * they run (and fail) regardless.
 */
export function hubMissing() {
  if (process.env.CI === "true") return null;
  return existsSync(HUB_BIN) ? null : `no hub at ${HUB_BIN} (set AGUI_HUB_BIN)`;
}

/** Every hub started by this test file, stopped at exit even if a test forgets. */
const started = new Set();
process.on("exit", () => {
  for (const hub of started) hub.proc.kill("SIGKILL");
});

/** Start `agui-hub serve` on 127.0.0.1 with a free port and the memory store (or `store`, e.g.
 * a Redis URL that several hubs share). */
export async function startHub(args = [], { timeout = 15_000, store = "memory://" } = {}) {
  const cmd = ["serve", "--host", "127.0.0.1", "--port", "0", "--store", store, ...args];
  const proc = spawn(HUB_BIN, cmd, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  const keep = (chunk) => {
    log = (log + chunk.toString()).slice(-20_000); // bounded: a chatty hub cannot fill memory
  };
  proc.stdout.on("data", keep);
  proc.stderr.on("data", keep);
  const port = await new Promise((resolvePort, reject) => {
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      reject(new Error(`the hub did not start in ${timeout} ms:\n${log}`));
    }, timeout);
    const check = () => {
      const match = LISTENING.exec(log);
      if (match) {
        clearTimeout(timer);
        proc.stdout.off("data", check);
        resolvePort(Number(match[1]));
      }
    };
    proc.stdout.on("data", check);
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the hub exited (${code}) before listening:\n${log}`));
    });
    proc.on("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
  const hub = new Hub(proc, port, () => log);
  started.add(hub);
  return hub;
}

export class Hub {
  constructor(proc, port, log) {
    this.proc = proc;
    this.port = port;
    this.log = log;
    this.ws = `ws://127.0.0.1:${port}`;
    this.http = `http://127.0.0.1:${port}`;
  }

  /**
   * GET a path: `{status, body}`. A fresh connection each time: the hub answers HTTP and closes,
   * and a pooled connection (fetch's) may be reused just as it closes.
   */
  get(path) {
    return new Promise((resolve, reject) => {
      const request = http.get(`${this.http}${path}`, { agent: false, timeout: 10_000 }, (response) => {
        let body = "";
        response.setEncoding("utf8");
        response.on("data", (chunk) => (body += chunk));
        response.on("end", () => resolve({ status: response.statusCode, body }));
        response.on("error", reject);
      });
      request.on("timeout", () => request.destroy(new Error(`GET ${path}: timed out`)));
      request.on("error", reject);
    });
  }

  /** The hub's view of a thread: {threadId, epoch, seq, state, messages, run}. */
  async thread(id) {
    const { status, body } = await this.get(`/v1/threads/${id}`);
    if (status !== 200) throw new Error(`GET thread ${id}: ${status} ${body}`);
    return JSON.parse(body);
  }

  /** One Prometheus series' value (0 when absent). */
  async metric(name, labels = {}) {
    const { body } = await this.get("/metrics");
    const label = Object.entries(labels)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => `${k}="${v}"`)
      .join(",");
    const series = label ? `${name}{${label}}` : name;
    const line = body.split("\n").find((l) => l.startsWith(series + " "));
    return line ? Number(line.split(" ").pop()) : 0;
  }

  /** SIGTERM, then SIGKILL after 5 s; only this hub's own process. */
  async stop() {
    started.delete(this);
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise((res) => this.proc.once("exit", res));
    this.proc.kill("SIGTERM");
    const timer = setTimeout(() => this.proc.kill("SIGKILL"), 5_000);
    await exited;
    clearTimeout(timer);
  }
}

/** An agent on `/v1/threads/{id}/agent`: sends events, waits for the hub's acks. */
export class Agent {
  static async open(hub, thread) {
    const ws = new WebSocket(`${hub.ws}/v1/threads/${thread}/agent`);
    const agent = new Agent(ws);
    await new Promise((res, rej) => {
      ws.once("error", rej);
      agent._onWelcome = res;
    });
    return agent;
  }

  constructor(ws) {
    this.ws = ws;
    this.sent = 0;
    this.acked = 0;
    this.ackedSeq = 0;
    this.errors = [];
    this.welcome = null;
    this._changed = () => {};
    ws.on("message", (data) => {
      const frame = JSON.parse(data.toString());
      if (frame.type !== "CUSTOM") return;
      if (frame.name === "hub.welcome") {
        this.welcome = frame.value;
        this._onWelcome?.();
      } else if (frame.name === "hub.ack") {
        this.acked = Math.max(this.acked, frame.value.count);
        this.ackedSeq = Math.max(this.ackedSeq, frame.value.seq);
      } else if (frame.name === "hub.error") {
        this.errors.push(frame.value);
      }
      this._changed();
    });
  }

  send(...events) {
    for (const event of events) {
      this.ws.send(JSON.stringify(event));
      this.sent++;
    }
    return this;
  }

  /** Wait until every frame sent was acknowledged or rejected; returns the errors. */
  async flush(timeout = 10_000) {
    const target = this.sent;
    const settled = () => this.acked + this.errors.filter((e) => e.frame > this.acked).length >= target;
    const deadline = Date.now() + timeout;
    while (!settled()) {
      if (Date.now() > deadline) throw new Error(`flush: ${this.acked}/${target} acked`);
      await new Promise((res) => {
        this._changed = res;
        setTimeout(res, 50);
      });
    }
    return this.errors;
  }

  async close() {
    if (this.ws.readyState === WebSocket.CLOSED) return;
    const closed = new Promise((res) => this.ws.once("close", res));
    this.ws.close();
    await closed;
  }
}

/** A unique thread id per test. */
let threads = 0;
export function threadId(prefix = "t") {
  return `${prefix}-${process.pid}-${++threads}`;
}

export const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
