// Test support: CopilotKit runtime processes (test-support/copilotkit-runtime.mjs), each its own
// node process, stopped by PID (SIGTERM, or SIGKILL to kill one mid-run).

import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const LISTENING = /listening (http:\/\/127\.0\.0\.1:\d+\/api)/;

const started = new Set();
process.on("exit", () => {
  for (const runtime of started) runtime.proc.kill("SIGKILL");
});

/** Start a runtime process on the hub node `hubUrl`: resolves once it listens (`pageDir`: a
 * page it serves from the same origin, at `/`). */
export async function startRuntime(hubUrl, { timeout = 20_000, pageDir } = {}) {
  const proc = spawn(process.execPath, [join(HERE, "copilotkit-runtime.mjs"), hubUrl], {
    cwd: join(HERE, ".."),
    env: { ...process.env, COPILOTKIT_TELEMETRY_DISABLED: "true", ...(pageDir ? { PAGE_DIR: pageDir } : {}) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  const keep = (chunk) => (log = (log + chunk).slice(-20_000));
  proc.stdout.on("data", keep);
  proc.stderr.on("data", keep);
  const runtime = new RuntimeProcess(proc, () => log);
  started.add(runtime);
  runtime.url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the runtime did not start in ${timeout} ms:\n${log}`)), timeout);
    const check = () => {
      const match = LISTENING.exec(log);
      if (match) {
        clearTimeout(timer);
        proc.stdout.off("data", check);
        resolve(match[1]);
      }
    };
    proc.stdout.on("data", check);
    proc.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`the runtime exited (${code ?? signal}) before listening:\n${log}`));
    });
  }).catch(async (err) => {
    await runtime.stop("SIGKILL");
    throw err;
  });
  return runtime;
}

export class RuntimeProcess {
  constructor(proc, log) {
    this.proc = proc;
    this.log = log;
    this.url = null;
  }

  get alive() {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** Stop this process (SIGTERM, SIGKILL after 5 s; or SIGKILL at once) and wait for its exit. */
  async stop(signal = "SIGTERM") {
    started.delete(this);
    if (!this.alive) return;
    const exited = new Promise((res) => this.proc.once("exit", res));
    this.proc.kill(signal);
    const timer = setTimeout(() => this.proc.kill("SIGKILL"), 5_000);
    await exited;
    clearTimeout(timer);
  }
}
