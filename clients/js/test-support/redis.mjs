// Test support: a real redis-server on a free loopback port, in a temp dir of its own, for hubs
// that share a store (as tests/redis_support.py does for the Python tests). Stopped by its PID.

import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

const BINARY = process.env.REDIS_SERVER ?? "redis-server";

/** Why Redis tests cannot run here, or null. Under CI=true they run (and fail) regardless. */
export function redisMissing() {
  if (process.env.CI === "true") return null;
  const probe = spawnSync(BINARY, ["--version"], { stdio: "ignore" });
  return probe.error || probe.status !== 0 ? `no ${BINARY} (apt-get install redis-server)` : null;
}

/** A port free on 127.0.0.1 now. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function ping(port) {
  return new Promise((resolve) => {
    const socket = net.connect({ host: "127.0.0.1", port });
    let answer = "";
    const done = (ok) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.on("error", () => done(false));
    socket.on("connect", () => socket.write("PING\r\n"));
    socket.on("data", (chunk) => {
      answer += chunk;
      if (answer.includes("\r\n")) done(answer.startsWith("+PONG"));
    });
  });
}

const started = new Set();
process.on("exit", () => {
  for (const redis of started) redis.proc.kill("SIGKILL");
});

/** Start redis-server (no persistence) and wait until it answers PING. */
export async function startRedis({ timeout = 10_000 } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "agui-redis-"));
  let lastError = null;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const args = ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir];
    args.push("--save", "", "--appendonly", "no", "--protected-mode", "yes");
    const proc = spawn(BINARY, args, { stdio: ["ignore", "pipe", "pipe"] });
    let log = "";
    const keep = (chunk) => (log = (log + chunk).slice(-8_000));
    proc.stdout.on("data", keep);
    proc.stderr.on("data", keep);
    const redis = new Redis(proc, port, dir);
    started.add(redis);
    const deadline = Date.now() + timeout;
    while (Date.now() < deadline && proc.exitCode === null) {
      if (await ping(port)) return redis;
      await new Promise((res) => setTimeout(res, 50));
    }
    lastError = new Error(`redis-server on ${port} did not answer PING:\n${log}`);
    await redis.stop({ keepDir: true }); // a port another process took: pick again
  }
  rmSync(dir, { recursive: true, force: true });
  throw lastError;
}

export class Redis {
  constructor(proc, port, dir) {
    this.proc = proc;
    this.port = port;
    this.dir = dir;
    this.url = `redis://127.0.0.1:${port}/0`;
  }

  /** SIGTERM, then SIGKILL after 5 s; its temp dir removed. */
  async stop({ keepDir = false } = {}) {
    started.delete(this);
    if (this.proc.exitCode === null && this.proc.signalCode === null) {
      const exited = new Promise((res) => this.proc.once("exit", res));
      this.proc.kill("SIGTERM");
      const timer = setTimeout(() => this.proc.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(timer);
    }
    if (!keepDir) rmSync(this.dir, { recursive: true, force: true });
  }
}
