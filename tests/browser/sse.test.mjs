// HubClient's SSE mode in a real browser: Debian's Chromium, headless, driven by playwright-core,
// with the browser's own EventSource. Run through pytest (tests/browser/test_sse_page.py), or
// by hand: `cd tests/browser && node --test sse.test.mjs` (CHROMIUM overrides /usr/bin/chromium).
//
// The parts, all real and on 127.0.0.1: a hub process (SQLite store in a temporary directory,
// the scripted AG-UI HTTP agent `echo`); a TCP relay in front of it, through which the page
// reaches the hub, which records the head of every request and can cut every connection or
// refuse new ones (as a network outage would); and a page on its own origin (sse/index.html,
// the client's modules), so the event stream and the runs are cross-origin, as for an app that
// lives apart from its hub (`--allow-origin`).

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import { dirname, extname, join, normalize, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

import { AgentServer } from "../../clients/js/test-support/agents.mjs";
import { Agent, hubMissing, startHub, threadId } from "../../clients/js/test-support/hub.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "../..");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const TIMEOUT = 15_000;
const START = { type: "STATE_SNAPSHOT", snapshot: { doc: { title: "Draft", sections: [] } } };
const section = (name) => ({ type: "STATE_DELTA", delta: [{ op: "add", path: "/doc/sections/-", value: name }] });
const text = (id, ...parts) => [
  { type: "TEXT_MESSAGE_START", messageId: id, role: "assistant" },
  ...parts.map((delta) => ({ type: "TEXT_MESSAGE_CONTENT", messageId: id, delta })),
  { type: "TEXT_MESSAGE_END", messageId: id },
];

// -- a TCP relay that can fail like a network ---------------------------------------------------

/** The heads of the HTTP requests in a client's byte stream (bodies by Content-Length). */
class RequestHeads {
  constructor(onHead) {
    this.buffer = Buffer.alloc(0);
    this.skip = 0;
    this.onHead = onHead;
  }

  feed(chunk) {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    for (;;) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, this.buffer.length);
        this.buffer = this.buffer.subarray(n);
        this.skip -= n;
        if (this.skip > 0) return;
      }
      const end = this.buffer.indexOf("\r\n\r\n");
      if (end < 0) return;
      const [line, ...rest] = this.buffer.subarray(0, end).toString("latin1").split("\r\n");
      this.buffer = this.buffer.subarray(end + 4);
      const headers = {};
      for (const h of rest) {
        const colon = h.indexOf(":");
        headers[h.slice(0, colon).trim().toLowerCase()] = h.slice(colon + 1).trim();
      }
      const [method, target] = line.split(" ");
      this.onHead({ method, target, headers });
      this.skip = Number(headers["content-length"] ?? 0);
    }
  }
}

class Relay {
  constructor(target) {
    this.target = target;
    this.refusing = false;
    /** Every request head that went through, in order. */
    this.requests = [];
    this.pairs = new Set();
    this.server = net.createServer((socket) => this._accept(socket));
  }

  async start() {
    await new Promise((res) => this.server.listen(0, "127.0.0.1", res));
    this.port = this.server.address().port;
    this.url = `http://127.0.0.1:${this.port}`;
    return this;
  }

  /** Cut every connection (a reset, as a network failure would) and refuse new ones. */
  cut() {
    this.refusing = true;
    for (const pair of this.pairs) for (const socket of pair) socket.resetAndDestroy();
    this.pairs.clear();
  }

  resume() {
    this.refusing = false;
  }

  /** The GETs of the thread's event stream. */
  streams(thread) {
    return this.requests.filter((r) => r.method === "GET" && r.target.startsWith(`/v1/threads/${thread}/events`));
  }

  _accept(client) {
    if (this.refusing) {
      client.resetAndDestroy();
      return;
    }
    const upstream = net.connect(this.target, "127.0.0.1");
    const pair = [client, upstream];
    this.pairs.add(pair);
    const heads = new RequestHeads((head) => this.requests.push(head));
    client.on("data", (chunk) => heads.feed(chunk));
    client.pipe(upstream);
    upstream.pipe(client);
    const end = () => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    for (const socket of pair) {
      socket.on("error", end);
      socket.on("close", end);
    }
  }

  async close() {
    this.cut();
    await new Promise((res) => this.server.close(res));
  }
}

// -- the page's own origin ----------------------------------------------------------------------

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
};
const ROOTS = {
  "/js/src/": join(ROOT, "clients/js/src"),
  "/js/vendor/": join(ROOT, "clients/js/vendor"),
  "/sse/": join(HERE, "sse"),
};

function pageServer(connectSrc) {
  return http.createServer(async (req, res) => {
    const path = new URL(req.url, "http://x").pathname;
    if (path === "/favicon.ico") {
      res.writeHead(204).end();
      return;
    }
    const prefix = Object.keys(ROOTS).find((p) => path.startsWith(p));
    const file = prefix && normalize(join(ROOTS[prefix], path.slice(prefix.length) || "index.html"));
    if (!file || !file.startsWith(ROOTS[prefix]) || !TYPES[extname(file)]) {
      res.writeHead(404).end();
      return;
    }
    try {
      const body = await readFile(file);
      res.writeHead(200, {
        "Content-Type": TYPES[extname(file)],
        "Cache-Control": "no-cache",
        // As the hub's own pages: no inline script; connections to the hub only.
        "Content-Security-Policy": `default-src 'self'; script-src 'self'; connect-src 'self' ${connectSrc}`,
      });
      res.end(body);
    } catch {
      res.writeHead(404).end();
    }
  });
}

// -- helpers ------------------------------------------------------------------------------------

/** Poll `fn(arg)` in the page until it returns something truthy. */
async function until(page, fn, arg, { timeout = TIMEOUT, what = "condition" } = {}) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const value = await page.evaluate(fn, arg);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** What the page's client holds and has seen. */
function held(page) {
  return page.evaluate(() => {
    const { client, welcomes, statuses, lastEventIds, applied } = window.__sse;
    return {
      seq: client.seq,
      epoch: client.epoch,
      status: client.status,
      inSync: client.inSync,
      snapshots: { ...client.snapshots },
      resyncs: { ...client.resyncs },
      reconnects: client.reconnects,
      welcomes: welcomes.map((w) => ({ ...w })),
      statuses: statuses.map((s) => [...s]),
      lastEventIds: [...lastEventIds],
      applied: applied.map((a) => ({ ...a })),
      source: client.socket?.source?.constructor?.name ?? null,
    };
  });
}

/** The page holds exactly the hub's state and messages at the hub's current seq. */
async function assertConverged(page, hub, thread) {
  const view = await hub.thread(thread);
  await until(page, (s) => window.__sse.client.inSync && window.__sse.client.seq >= s, view.seq, {
    what: `seq ${view.seq}`,
  });
  const dump = await page.evaluate((s) => window.__sse.history.get(s) ?? null, view.seq);
  assert.notEqual(dump, null, `the page held seq ${view.seq}`);
  assert.deepEqual(JSON.parse(dump), { state: view.state, messages: view.messages });
  const mine = await held(page);
  assert.equal(mine.epoch, view.epoch);
  return view;
}

// -- the tests ----------------------------------------------------------------------------------

const skip = hubMissing() ?? false;
let dir;
let hub;
let relay;
let pages;
let agents;
let browser;
let page;
let pageOrigin;
const problems = [];
const thread = threadId("sse-page");

before(async () => {
  if (skip) return;
  dir = mkdtempSync(join(tmpdir(), "agui-sse-browser-"));
  agents = await new AgentServer().start();
  // The relay's port is the hub's address as the page knows it; the page's origin is allowed.
  relay = await new Relay(0).start();
  pages = pageServer(relay.url);
  await new Promise((res) => pages.listen(0, "127.0.0.1", res));
  pageOrigin = `http://127.0.0.1:${pages.address().port}`;
  hub = await startHub(hubArgs(pageOrigin));
  relay.target = hub.port;
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"],
  });
  page = await browser.newPage();
  page.on("console", (m) => {
    // Requests refused while the relay is cut are expected; anything else is a problem.
    const refused = /net::ERR_(CONNECTION_RESET|EMPTY_RESPONSE|CONNECTION_REFUSED|CONNECTION_CLOSED|SOCKET_NOT_CONNECTED)/;
    if (m.type() === "error" && !refused.test(m.text())) problems.push(`${m.text()} (${m.location().url})`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
});

function hubArgs(origin) {
  return ["--store", `sqlite:///${join(dir, "hub.db")}`, "--allow-origin", origin, "--agent", `echo=${agents.url("echo")}`];
}

after(async () => {
  await browser?.close();
  await hub?.stop();
  await relay?.close();
  await new Promise((res) => (pages ? pages.close(res) : res()));
  await agents?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("a page joins over the browser's EventSource and follows live events", { skip }, async () => {
  const agent = await Agent.open(hub, thread);
  agent.send(START, section("one"), ...text("m1", "Hello"));
  assert.deepEqual(await agent.flush(), []);
  const query = new URLSearchParams({ hub: relay.url, thread });
  await page.goto(`${pageOrigin}/sse/index.html?${query}`);
  await until(page, () => window.__sse?.client.status === "open" && window.__sse.client.inSync, null, { what: "the join" });
  agent.send(section("two"), ...text("m2", "live ", "text"));
  await agent.flush();
  const view = await assertConverged(page, hub, thread);
  const mine = await held(page);
  assert.equal(mine.source, "EventSource", "the browser's own");
  assert.deepEqual(mine.snapshots, { join: 1 });
  assert.deepEqual(mine.welcomes.map((w) => w.resumed), [false]);
  // Live events carry their position as the SSE id, which the browser's EventSource reports.
  assert.equal(mine.lastEventIds.at(-1), `${view.epoch}:${view.seq}`);
  assert.equal(relay.streams(thread).length, 1);
  assert.equal(relay.streams(thread)[0].headers["last-event-id"], undefined);
  assert.equal(await page.textContent('[data-testid="status"]'), "open");
  await agent.close();
});

test("a cut connection: the browser reconnects with Last-Event-ID and gets a replay, not a snapshot", { skip }, async () => {
  const before = await assertConverged(page, hub, thread);
  const seen = (await held(page)).applied.length;
  relay.cut(); // every connection reset, new ones refused: the page is offline
  await until(page, () => window.__sse.client.status !== "open", null, { what: "the page to notice" });
  const agent = await Agent.open(hub, thread); // the hub directly, not through the relay
  agent.send(section("while away"), ...text("m3", "missed"));
  await agent.flush();
  const refused = relay.streams(thread).length;
  await new Promise((r) => setTimeout(r, 1_500)); // an attempt or two refused meanwhile
  relay.resume();
  await until(page, () => window.__sse.client.reconnects === 1 && window.__sse.client.status === "open", null, {
    what: "the reconnect",
  });
  const after = await assertConverged(page, hub, thread);
  const mine = await held(page);
  const resumedWith = relay.streams(thread).slice(refused);
  assert.equal(resumedWith.length, 1);
  assert.equal(resumedWith[0].headers["last-event-id"], `${before.epoch}:${before.seq}`);
  assert.equal(new URL(resumedWith[0].target, "http://x").searchParams.get("since"), null, "not the client's own reopen");
  assert.deepEqual(mine.welcomes.map((w) => w.resumed), [false, true]);
  assert.deepEqual(mine.snapshots, { join: 1 }, "no snapshot");
  // The missed events, one by one, as live events.
  const replayed = mine.applied.slice(seen);
  assert.deepEqual(
    replayed.map((a) => a.seq),
    Array.from({ length: after.seq - before.seq }, (_, i) => before.seq + 1 + i),
  );
  assert.ok(replayed.every((a) => !a.sync));
  await agent.close();
});

test("the hub restarts on its SQLite store: the page resumes from the new process's log", { skip }, async () => {
  const before = await assertConverged(page, hub, thread);
  const seen = (await held(page)).applied.length;
  const streams = relay.streams(thread).length;
  await hub.stop(); // the stream ends; the page's attempts meet a dead upstream
  await until(page, () => window.__sse.client.status !== "open", null, { what: "the page to notice" });
  hub = await startHub(hubArgs(pageOrigin));
  const agent = await Agent.open(hub, thread);
  agent.send(section("second life"), ...text("m4", "after the restart"));
  assert.deepEqual(await agent.flush(), []);
  relay.target = hub.port; // from now on the page's attempts reach the new process
  await until(page, () => window.__sse.client.reconnects === 2 && window.__sse.client.status === "open", null, {
    what: "the reconnect to the restarted hub",
  });
  const after = await assertConverged(page, hub, thread);
  assert.equal(after.epoch, before.epoch, "the store kept the thread's history");
  assert.deepEqual(after.state.doc.sections, ["one", "two", "while away", "second life"]);
  const mine = await held(page);
  assert.deepEqual(mine.welcomes.map((w) => w.resumed), [false, true, true]);
  assert.deepEqual(mine.snapshots, { join: 1 }, "no snapshot");
  const attempts = relay.streams(thread).slice(streams);
  assert.ok(attempts.length >= 1);
  for (const attempt of attempts) assert.equal(attempt.headers["last-event-id"], `${before.epoch}:${before.seq}`);
  const replayed = mine.applied.slice(seen);
  assert.deepEqual(
    replayed.map((a) => a.seq),
    Array.from({ length: after.seq - before.seq }, (_, i) => before.seq + 1 + i),
  );
  await agent.close();
});

test("run() from the page is a cross-origin POST; the agent's reply streams into the page", { skip }, async () => {
  const runId = await page.evaluate(async () => {
    const started = await window.__sse.client.run("echo", [{ id: "u-page", role: "user", content: "from the page" }]);
    return started.runId;
  });
  await until(page, (id) => window.__sse.client.messages.some((m) => m.id === `reply-${id}`) && window.__sse.client.mirror.runId === null, runId, {
    what: "the reply",
  });
  const view = await assertConverged(page, hub, thread);
  assert.equal(view.messages.at(-1).content, "You said “from the page”");
  assert.ok(relay.requests.some((r) => r.method === "POST" && r.target === `/v1/threads/${thread}/runs`));
  const mine = await held(page);
  assert.deepEqual(mine.snapshots, { join: 1 });
  assert.deepEqual(mine.resyncs, {});
});

test("no page error and no console error besides the refused requests", { skip }, () => {
  assert.deepEqual(problems, []);
});
