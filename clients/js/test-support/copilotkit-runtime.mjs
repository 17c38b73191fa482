// A CopilotKit runtime in a process of its own: @copilotkit/runtime's Node listener
// (createCopilotNodeListener) on 127.0.0.1, its agent `default` a StreamingAgent, its runner an
// AguiHubRunner on the hub node given, with the runner's thread hooks. Prints
// `listening http://127.0.0.1:PORT/api` once it serves. With PAGE_DIR, it serves that page too.
//
//   node test-support/copilotkit-runtime.mjs http://127.0.0.1:HUBPORT

import { readFile } from "node:fs/promises";
import http from "node:http";
import { extname, join } from "node:path";

import WebSocket from "ws";

process.env.COPILOTKIT_TELEMETRY_DISABLED = "true";
const { CopilotRuntime } = await import("@copilotkit/runtime/v2");
const { createCopilotNodeListener } = await import("@copilotkit/runtime/v2/node");
const { AguiHubRunner } = await import("../src/copilotkit.js");
const { StreamingAgent } = await import("./copilotkit-agent.mjs");

const [hubUrl] = process.argv.slice(2);
const runner = new AguiHubRunner({ url: hubUrl, WebSocket });
const runtime = new CopilotRuntime({ agents: { default: new StreamingAgent() }, runner });
const listener = createCopilotNodeListener({ runtime, basePath: "/api", hooks: runner.threadHooks() });
// PAGE_DIR: a page served from the same origin (its files by name, `/` its index.html), so a
// browser test needs no CORS: everything else is the runtime's.
const PAGE_DIR = process.env.PAGE_DIR;
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css" };
const server = http.createServer((req, res) => {
  const path = new URL(req.url, "http://localhost").pathname;
  if (!PAGE_DIR || path.startsWith("/api")) return listener(req, res);
  const name = path === "/" ? "index.html" : path.slice(1);
  const type = TYPES[extname(name)];
  if (!/^[\w.-]+$/.test(name) || !type) {
    res.writeHead(404).end();
    return;
  }
  readFile(join(PAGE_DIR, name)).then(
    (body) => res.writeHead(200, { "Content-Type": type, "Cache-Control": "no-store" }).end(body),
    () => res.writeHead(404).end(),
  );
});
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`listening http://127.0.0.1:${server.address().port}/api\n`);
});
process.on("SIGTERM", () => {
  server.closeAllConnections?.();
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 1_000).unref();
});
