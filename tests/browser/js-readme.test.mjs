// Every code block of the browser client's README (clients/js/README.md) works as written: this
// suite reads the README block by block, in order, and runs each one for real against the
// `agui-hub demo` that tests/browser/test_js_readme.py started (AGUI_HUB_URL), thread `doc-1`
// seeded as the demo agent writes a document (a run of the demo agent, `title: Draft`):
//
// - an `html` block is a page, opened in Debian's Chromium, headless (playwright-core): served
//   by a front on 127.0.0.1 (a reverse proxy, as a site puts its pages and its hub behind one)
//   that passes everything else to the hub, so the page's own origin is the hub's; what it
//   loads, `/js/src/agui-hub.js` included, and its WebSocket or event stream are the real
//   hub's, and the hub the block names (`127.0.0.1:8787`) is the front;
// - a `js` block is a Node script at the root of a checkout (a scratch folder whose `clients`
//   is this checkout's, `ws` and the client's packages installed beside it), run with `node`;
// - the `sh` block runs with `bash -e -o pipefail` in a scratch checkout holding a copy of
//   clients/js (its `npm ci` must not replace the node_modules other tests are using) and the
//   project's venv;
// - a `text` block is a listing or an output: nothing to run.
//
// Each block is then checked against what its comments say (below, one check per block, found
// by what the block is). The only change made to a block is the port: `127.0.0.1:8787`, the
// demo's, becomes the demo this test runs on (the front, in a page). A block marked
// `<!-- test: skip REASON -->` on the line before its fence is not run; a `text` block marked
// `<!-- test: output -->` is what the block before it printed (tests/docs/test_docs.py's
// marks). A fence of any other language, or a block no check here knows, fails: every block is
// run by this test.
//
// Run through pytest (tests/browser/test_js_readme.py), or by hand against a demo you started
// (a fresh one: thread doc-1 must be new):
//   .venv/bin/agui-hub demo --port 8787 --store memory:// --interval 5 &
//   cd tests/browser && AGUI_HUB_URL=http://127.0.0.1:8787 node --test js-readme.test.mjs

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import http from "node:http";
import net from "node:net";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { format } from "node:util";

import { chromium } from "playwright-core";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "../..");
const CLIENT = join(ROOT, "clients", "js");
const README = join(CLIENT, "README.md");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const HUB = process.env.AGUI_HUB_URL;
const THREAD = "doc-1";
const DEMO_PORT = 8787;
const TIMEOUT = 15_000;
/** Seconds a Node block may run, and the sh block (npm ci: about 30 s since @copilotkit/runtime). */
const SCRIPT_TIMEOUT = 30_000;
const SH_TIMEOUT = 180_000;
/** A token the SSE page is given in its fragment (the demo is open: it ignores tokens). */
const TOKEN = "readme-token";

const FENCE = /^```(\S*)\s*$/;
const MARK = /^<!-- test: (background|skip|output)\b\s*(.*?)\s*-->$/;
const LANGS = ["html", "js", "sh", "text"];

// -- the README, block by block -------------------------------------------------------------------

/** The fenced blocks of a Markdown text, each with the mark on the line before its fence. */
function blocksOf(text) {
  const lines = text.split("\n");
  const found = [];
  for (let i = 0; i < lines.length; i++) {
    const fence = FENCE.exec(lines[i]);
    if (!fence) continue;
    let j = i + 1;
    while (j < lines.length && lines[j].trimEnd() !== "```") j++;
    assert.ok(j < lines.length, `README.md:${i + 1}: a code block is never closed`);
    const mark = MARK.exec((lines[i - 1] ?? "").trim());
    found.push({
      line: i + 1,
      where: `${relative(ROOT, README)}:${i + 1}`,
      lang: fence[1],
      code: lines.slice(i + 1, j).join("\n") + "\n",
      mark: mark?.[1] ?? null,
      reason: mark?.[2] ?? "",
    });
    i = j;
  }
  return found;
}

/** The block with the demo's port made `port` (the demo's, or the front's for a page); any other
 * loopback port fails. */
function rewrite(block, port = new URL(HUB).port) {
  return block.code.replace(/127\.0\.0\.1:(\d{2,5})\b/g, (whole, wanted) => {
    assert.equal(Number(wanted), DEMO_PORT, `${block.where} names 127.0.0.1:${wanted}: only the demo's port is known`);
    return `127.0.0.1:${port}`;
  });
}

// -- the hub --------------------------------------------------------------------------------------

async function getThread() {
  const response = await fetch(`${HUB}/v1/threads/${THREAD}`);
  assert.equal(response.status, 200, await response.clone().text());
  return response.json();
}

/** Poll `probe` until it returns a truthy value (which is returned); fail with `what`. */
async function until(what, probe, timeout = TIMEOUT) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`${what} (after ${timeout} ms)${last ? `: ${last.message}` : ""}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The thread once no run is open on it. */
const idle = () => until("no run open on doc-1", async () => ((t) => t.run === null && t)(await getThread()));

// -- pages ----------------------------------------------------------------------------------------

/**
 * The pages' origin: a reverse proxy on 127.0.0.1, as a site puts its pages and its hub behind
 * one front. It serves each html block as a page at `/readme/block-LINE.html` and passes
 * everything else, WebSocket upgrades included, to the hub untouched (the Host header too, so
 * the hub sees a page of its own origin).
 */
class Front {
  constructor(target) {
    this.target = new URL(target);
    this.pages = new Map();
    this.sockets = new Set();
    this.agent = new http.Agent({ keepAlive: false });
    this.server = http.createServer((req, res) => this.request(req, res));
    this.server.on("upgrade", (req, socket, head) => this.upgrade(req, socket, head));
    this.server.on("connection", (s) => (this.sockets.add(s), s.on("close", () => this.sockets.delete(s))));
  }

  async start() {
    await new Promise((r) => this.server.listen(0, "127.0.0.1", r));
    this.origin = `http://127.0.0.1:${this.server.address().port}`;
    return this;
  }

  request(req, res) {
    const path = new URL(req.url, this.origin).pathname;
    const page = this.pages.get(path);
    if (path === "/favicon.ico") {
      res.writeHead(204).end(); // the site has none (the hub would answer 404, a console error)
      return;
    }
    if (page !== undefined) {
      res.writeHead(200, { "Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store" });
      res.end(page);
      return;
    }
    const upstream = http.request(
      {
        agent: this.agent,
        host: this.target.hostname,
        port: this.target.port,
        method: req.method,
        path: req.url,
        headers: req.headers,
      },
      (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
      },
    );
    upstream.on("error", () => res.destroy());
    req.pipe(upstream);
  }

  upgrade(req, socket, head) {
    const upstream = net.connect(Number(this.target.port), this.target.hostname, () => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
      upstream.write(lines.join("\r\n") + "\r\n\r\n");
      upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    this.sockets.add(upstream);
    upstream.on("close", () => (this.sockets.delete(upstream), socket.destroy()));
    socket.on("close", () => upstream.destroy());
    upstream.on("error", () => socket.destroy());
    socket.on("error", () => upstream.destroy());
  }

  async close() {
    for (const s of this.sockets) s.destroy();
    this.agent.destroy();
    await new Promise((r) => this.server.close(r));
  }
}

let profile;
let context;
let scratch;
let front;
const problems = [];

/** A tab showing `block` as a page of the front (its console and errors recorded); the hub the
 * block names is the front, as its pages reach it. */
async function openPage(block, name, { fragment = "", setup = async () => {} } = {}) {
  const path = `/readme/block-${block.line}.html`;
  const code = rewrite(block, new URL(front.origin).port);
  front.pages.set(path, `<!doctype html>\n<meta charset="utf-8">\n<title>${block.where}</title>\n${code}`);
  const page = await context.newPage();
  page.on("console", (m) => m.type() === "error" && problems.push(`${name}: console: ${m.text()}`));
  page.on("pageerror", (e) => problems.push(`${name}: page error: ${e.message}`));
  await setup(page);
  await page.goto(front.origin + path + fragment);
  return page;
}

/** What a page shows: the state dump (`#state`), and the chat's lines (`#chat`) if it has one. */
async function shown(page) {
  const text = await page.textContent("#state");
  const chat = await page.$$eval("#chat li", (items) => items.map((li) => li.textContent));
  return { state: text ? JSON.parse(text) : undefined, chat };
}

/** Wait until `page` shows what the hub holds (the thread is quiet: only this test writes it). */
async function converged(page, name, { chat = true } = {}) {
  return until(`${name} shows GET /v1/threads/${THREAD}`, async () => {
    const thread = await getThread();
    const seen = await shown(page);
    assert.deepEqual(seen.state, thread.state);
    if (chat) assert.deepEqual(seen.chat, thread.messages.map((m) => `${m.role}: ${m.content ?? ""}`));
    return thread;
  });
}

async function rename(page, title) {
  await page.fill("#new-title", title);
  await page.click("#rename button");
}

// -- scripts --------------------------------------------------------------------------------------

/** Run `argv` in `cwd`; its exit code, stdout and stderr, killed after `timeout` ms. */
function run(argv, { cwd, env = process.env, timeout }) {
  return new Promise((resolveRun, reject) => {
    // Not a child of this test runner: a `node --test` the block runs reports on its own.
    env = Object.fromEntries(Object.entries(env).filter(([k]) => k !== "NODE_TEST_CONTEXT"));
    const child = spawn(argv[0], argv.slice(1), { cwd, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c) => (stdout += c));
    child.stderr.on("data", (c) => (stderr += c));
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid, "SIGKILL"); // its process group: what the block started
      } catch {}
      reject(new Error(`${argv.join(" ")} still running after ${timeout} ms\n${stdout.slice(-5000)}\n${stderr.slice(-5000)}`));
    }, timeout);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolveRun({ code, stdout, stderr });
    });
  });
}

/** Run a js block as `node block.mjs` at the root of the scratch checkout; what it printed. */
async function node(block) {
  const code = rewrite(block);
  const script = join(scratch, "main", `block_${block.line}.mjs`);
  writeFileSync(script, code);
  const out = await run([process.execPath, script], { cwd: join(scratch, "main"), timeout: SCRIPT_TIMEOUT });
  const report = `--- code:\n${code}--- stdout:\n${out.stdout}--- stderr:\n${out.stderr}`;
  assert.equal(out.code, 0, `${block.where} exited ${out.code}\n${report}`);
  assert.equal(out.stderr, "", `${block.where} wrote to stderr\n${report}`);
  return out.stdout;
}

// -- what each block must do ----------------------------------------------------------------------

const CHECKS = [
  {
    // The page on the hub's origin: mirrors the thread, shows its messages and status, renames
    // the title with a tested edit, and tells its user when someone else changed it first.
    name: "a page with a HubClient that publishes a tested edit",
    matches: (b) => b.lang === "html" && b.code.includes("hub.publish") && !b.code.includes('"sse"'),
    async run(block) {
      const a = await openPage(block, "A");
      // Tab B's frames from the hub can be held back, so it edits a title it has not seen change.
      const wire = { holding: false, held: [], sent: [], route: null };
      const b = await openPage(block, "B", {
        setup: (page) =>
          page.routeWebSocket(/\/v1\/threads\/doc-1/, (ws) => {
            const server = ws.connectToServer();
            wire.route = ws;
            ws.onMessage((m) => (wire.sent.push(String(m)), server.send(m)));
            server.onMessage((m) => (wire.holding ? wire.held.push(String(m)) : ws.send(m)));
            ws.onClose((code, reason) => server.close({ code, reason }));
            server.onClose((code, reason) => ws.close({ code, reason }));
          }),
      });
      for (const [page, name] of [[a, "A"], [b, "B"]]) {
        await converged(page, name);
        const status = await page.textContent("#status");
        assert.match(status, /^open \{"resumed":false,"node":"[^"]+"\}$/, `${name}'s status`);
      }
      const start = await getThread();
      assert.equal(start.state.title, "Draft");

      // An edit made against the current title is acked, and both tabs show it.
      await rename(a, "Alpha");
      await until("the hub holds title Alpha", async () => (await getThread()).state.title === "Alpha");
      await converged(a, "A");
      await converged(b, "B");
      assert.equal(await a.textContent("#notice"), "");

      // B is behind (its frames held); A renames again; B renames what it still shows.
      wire.holding = true;
      await rename(a, "Beta");
      await until("the hub holds title Beta", async () => (await getThread()).state.title === "Beta");
      await converged(a, "A");
      assert.equal((await shown(b)).state.title, "Alpha", "tab B has not seen Beta yet");
      await rename(b, "Gamma");
      await until("B's edit, tested against Alpha, reached the hub", () =>
        wire.sent.some((m) => m.includes('"hub.publish"') && m.includes("Gamma") && m.includes('"Alpha"')),
      );
      await until("the hub refused it: conflict", () =>
        wire.held.some((m) => m.includes('"hub.error"') && m.includes('"conflict"')),
      );
      wire.holding = false;
      for (const m of wire.held.splice(0)) wire.route.send(m);

      assert.equal(await until("B tells its user", () => b.textContent("#notice")), "Someone else changed the title");
      const end = await converged(b, "B"); // repaired by the hub's fresh snapshot
      assert.equal(end.state.title, "Beta", "the refused edit changed nothing");
      await converged(a, "A");
      assert.equal(await a.textContent("#notice"), "");
      await a.close();
      await b.close();
    },
  },
  {
    // Node: joins, prints the copy, exits (the client closed).
    name: "a Node script with a HubClient",
    matches: (b) => b.lang === "js" && b.code.includes("HubClient") && b.code.includes("whenSynced"),
    async run(block) {
      const printed = await node(block);
      const thread = await getThread();
      assert.equal(printed, format(thread.seq, thread.state, thread.messages) + "\n", "what it printed is the hub's thread");
      return printed;
    },
  },
  {
    // A page over SSE, its token from its fragment: mirrors the thread through the browser's
    // EventSource, runs the demo agent with a POST, and the run's section reaches the page.
    name: "a page with a HubClient over SSE that runs an agent",
    matches: (b) => b.lang === "html" && b.code.includes('transport: "sse"'),
    async run(block) {
      const before = await idle();
      const requests = [];
      const logged = [];
      const sockets = [];
      const page = await openPage(block, "SSE", {
        fragment: `#token=${TOKEN}`,
        setup: async (p) => {
          p.on("request", (r) => requests.push(r));
          p.on("websocket", (ws) => sockets.push(ws.url()));
          p.on("console", (m) => m.type() === "log" && logged.push(m.text()));
        },
      });
      const runId = (await until("the page logs its run", () => logged.find((t) => t.startsWith("run ")))).slice(4);
      const after = await idle();
      const titles = after.state.sections.map((s) => s.title);
      assert.ok(titles.includes("Next steps"), `the demo agent added the section: ${titles}`);
      assert.equal(after.state.sections.length, before.state.sections.length + 1);
      assert.deepEqual(after.messages.find((m) => m.id === "u1"), { id: "u1", role: "user", content: "section: Next steps" });
      assert.ok(after.messages.some((m) => m.id === `reply-${runId}`), "the agent answered that run");
      await converged(page, "SSE", { chat: false });

      const stream = requests.filter((r) => new URL(r.url()).pathname === `/v1/threads/${THREAD}/events`);
      assert.ok(stream.length >= 1, "an event stream was opened");
      for (const r of stream) {
        assert.equal(r.resourceType(), "eventsource");
        assert.equal(new URL(r.url()).searchParams.get("access_token"), TOKEN);
      }
      const posts = requests.filter((r) => new URL(r.url()).pathname === `/v1/threads/${THREAD}/runs`);
      assert.equal(posts.length, 1, "one run, one request");
      assert.equal(posts[0].method(), "POST");
      assert.equal((await posts[0].allHeaders()).authorization, `Bearer ${TOKEN}`);
      const answer = await (await posts[0].response()).json();
      assert.deepEqual(answer, { threadId: THREAD, runId });
      assert.deepEqual(sockets, [], "no WebSocket");
      await page.close();
    },
  },
  {
    // Node: the official AG-UI client's pipeline ends holding the hub's thread.
    name: "a Node script with a HubAgent",
    matches: (b) => b.lang === "js" && b.code.includes("HubAgent"),
    async run(block) {
      const printed = await node(block);
      const thread = await getThread();
      const tail = format(thread.state, thread.messages) + "\n";
      assert.ok(printed.endsWith(tail), `it ends printing the hub's state and messages:\n${printed}`);
      const changes = printed.slice(0, -tail.length).split("\n").filter(Boolean);
      assert.ok(changes.length >= 1, "onStateChanged was called");
      for (const line of changes) assert.equal(line, `title: ${thread.state.title}`);
      return printed;
    },
  },
  {
    // The client's install, from the root of a checkout: its locked packages install as
    // written (the suite they serve is tests/js/test_js_client.py's, not run twice here).
    name: "the client's install command",
    matches: (b) => b.lang === "sh" && /\bnpm ci\b/.test(b.code),
    async run(block) {
      const checkout = join(scratch, "sh", "main");
      mkdirSync(join(checkout, "clients"), { recursive: true });
      cpSync(CLIENT, join(checkout, "clients", "js"), {
        recursive: true,
        filter: (src) => relative(CLIENT, src).split("/")[0] !== "node_modules",
      });
      symlinkSync(join(ROOT, ".venv"), join(checkout, ".venv")); // the hub the suite starts
      const env = {
        ...process.env,
        PATH: `${join(ROOT, ".venv", "bin")}:${process.env.PATH}`,
        npm_config_prefer_offline: "true", // the locked packages from npm's cache when it has them
        npm_config_fund: "false",
        npm_config_audit: "false",
      };
      const code = rewrite(block);
      const out = await run(["bash", "-e", "-o", "pipefail", "-c", code], { cwd: checkout, env, timeout: SH_TIMEOUT });
      assert.equal(out.code, 0, `${block.where} exited ${out.code}\n${out.stdout.slice(-8000)}\n${out.stderr.slice(-4000)}`);
      // What the lock file promises is there: the client's peers and its test tools.
      for (const name of ["@ag-ui/client", "@copilotkit/runtime", "ws", "rxjs"]) {
        const manifest = join(checkout, "clients", "js", "node_modules", name, "package.json");
        assert.ok(existsSync(manifest), `${block.where}: npm ci installed no ${name}`);
      }
    },
  },
];

// -- the tests ------------------------------------------------------------------------------------

const blocks = blocksOf(readFileSync(README, "utf8"));

before(async () => {
  assert.ok(HUB, "AGUI_HUB_URL: the demo hub (test_js_readme.py starts one)");
  scratch = mkdtempSync(join(tmpdir(), "agui-js-readme-"));
  // A checkout as a reader has it, for the Node blocks: this one's clients/, and `ws` (the
  // client's packages) installed beside the script.
  mkdirSync(join(scratch, "main"));
  symlinkSync(join(ROOT, "clients"), join(scratch, "main", "clients"));
  symlinkSync(join(CLIENT, "node_modules"), join(scratch, "main", "node_modules"));
  // doc-1 holds a document as the demo agent writes it (the tutorial's thread), from nothing:
  // the blocks' message ids are fixed, and a message the thread has is not added again.
  const fresh = await getThread();
  assert.equal(fresh.seq, 0, `${THREAD} has been written already: run against a fresh demo (--store memory://)`);
  const seeded = await fetch(`${HUB}/v1/threads/${THREAD}/runs`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ agent: "demo", messages: [{ id: `seed-${Date.now()}`, role: "user", content: "title: Draft" }] }),
  });
  assert.equal(seeded.status, 202, await seeded.text());
  assert.equal((await idle()).state.title, "Draft");
  front = await new Front(HUB).start();
  profile = mkdtempSync(join(tmpdir(), "agui-hub-chromium-"));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});

after(async () => {
  await context?.close();
  await front?.close();
  for (const dir of [profile, scratch]) if (dir) rmSync(dir, { recursive: true, force: true });
});

test("every block says what it is, and a check here runs it", () => {
  const unknown = blocks.filter((b) => !LANGS.includes(b.lang)).map((b) => `${b.where}: \`\`\`${b.lang}`);
  assert.deepEqual(unknown, [], "a fence with no language (or one this test cannot run)");
  assert.deepEqual(blocks.filter((b) => b.mark === "skip" && !b.reason).map((b) => b.where), [], "a skip says why");
  assert.deepEqual(blocks.filter((b) => b.mark === "background").map((b) => b.where), [], "nothing runs behind here");
  const runnable = blocks.filter((b) => b.lang !== "text" && b.mark !== "skip");
  const unchecked = runnable.filter((b) => CHECKS.filter((c) => c.matches(b)).length !== 1);
  assert.deepEqual(unchecked.map((b) => b.where), [], "each block to run matches exactly one check");
  const unused = CHECKS.filter((c) => !runnable.some((b) => c.matches(b)));
  assert.deepEqual(unused.map((c) => c.name), [], "a check whose block is gone");
});

let printedLast = "";
for (const block of blocks) {
  const check = CHECKS.find((c) => c.matches(block));
  const title = `${block.where} (${block.lang}): ${check?.name ?? "nothing to run"}`;
  if (block.mark === "skip") {
    test(title, { skip: block.reason }, () => {});
  } else if (block.mark === "output") {
    test(title, () => assert.equal(printedLast, rewrite(block), `${block.where}: the block before printed`));
  } else if (block.lang === "text") {
    test(title, () => {});
  } else if (check) {
    test(title, async () => {
      problems.length = 0;
      printedLast = (await check.run(block)) ?? "";
      assert.deepEqual(problems, [], "no page error, no console error");
    });
  }
}
