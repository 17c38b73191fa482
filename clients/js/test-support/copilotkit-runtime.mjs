// A CopilotKit runtime in a process of its own: @copilotkit/runtime's Node listener
// (createCopilotNodeListener) on 127.0.0.1, its agent `default` a StreamingAgent, its runner an
// AguiHubRunner on the hub node given, with the runner's thread hooks. Prints
// `listening http://127.0.0.1:PORT/api` once it serves.
//
//   node test-support/copilotkit-runtime.mjs http://127.0.0.1:HUBPORT

import http from "node:http";

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
const server = http.createServer(listener);
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`listening http://127.0.0.1:${server.address().port}/api\n`);
});
process.on("SIGTERM", () => {
  server.closeAllConnections?.();
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 1_000).unref();
});
