// Joins N consumers (50 at a time, alternating over the given nodes) the way much Node code
// does: `await` the opening, then listen for messages. Prints one JSON line: per consumer, the
// milliseconds from connecting to its first frame (-1 if none came within the limit).
// Usage: node join-storm.mjs ws://h:p,ws://h:p THREAD N [LIMIT_MS]
import WebSocket from "ws";

const [urls, thread, count, limitArg] = process.argv.slice(2);
const nodes = urls.split(",");
const limitMs = Number(limitArg ?? 5000);

function opened(url) {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  return new Promise((resolve, reject) => {
    ws.once("open", () => resolve(ws));
    ws.once("error", reject);
  });
}

function firstFrame(ws) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(null), limitMs);
    ws.once("message", (data) => {
      clearTimeout(timer);
      resolve(JSON.parse(String(data)));
    });
  });
}

const waits = new Array(Number(count)).fill(-1);
const firsts = new Array(Number(count)).fill(null);
const sockets = [];
let next = 0;
async function worker() {
  while (next < waits.length) {
    const i = next++;
    const started = performance.now();
    const ws = await opened(`${nodes[i % nodes.length]}/v1/threads/${thread}`);
    sockets.push(ws);
    const frame = await firstFrame(ws);
    if (frame !== null) {
      waits[i] = Math.round(performance.now() - started);
      firsts[i] = frame.type === "CUSTOM" ? frame.name : frame.type;
    }
  }
}
await Promise.all(Array.from({ length: Math.min(50, waits.length) }, worker));
for (const ws of sockets) ws.terminate();
console.log(JSON.stringify({ waits, firsts }));
