// The demo pages in a real browser: Debian's Chromium, headless, driven by playwright-core (which
// never downloads a browser). Run through pytest (tests/browser/test_demo_pages.py), which starts
// `agui-hub demo` and passes:
//
//   AGUI_HUB_URL          http://127.0.0.1:PORT of the hub (the demo agent writes thread `demo`)
//   AGUI_BOARD_FIXTURE    a JSON file: an operator board (hub/receipts/board.py's shape)
//   AGUI_ARTIFACTS        where screenshots go (default: test-artifacts/screenshots)
//   AGUI_README_SCREENSHOT  if set, the document page's screenshot (a question answered) is also
//                         written there
//   CHROMIUM              the browser (default /usr/bin/chromium)
//
// The tests run in order and share one browser and three tabs: A and B on the document, C on the
// dashboard. Every check of a tab's copy compares it with GET /v1/threads/demo at the same seq.

import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "../..");
const HUB = process.env.AGUI_HUB_URL;
const ARTIFACTS = process.env.AGUI_ARTIFACTS ?? join(ROOT, "test-artifacts", "screenshots");
const README_SHOT = process.env.AGUI_README_SCREENSHOT ?? null;
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const BOARD_THREAD = "ops-sample";
const VIEWPORT = { width: 1280, height: 860 };
const HOSTILE = '<img src="x" onerror="window.__pwned = 1"><b>not bold</b>';

if (!HUB) throw new Error("AGUI_HUB_URL is not set: run these tests through pytest tests/browser");

let context;
let profile;
const tabs = {};
/** Console errors and page errors of every tab (CSP violations show up here). */
const problems = [];

// -- helpers ------------------------------------------------------------------------------------

async function getJson(path) {
  const response = await fetch(HUB + path);
  assert.equal(response.status, 200, `GET ${path}`);
  return response.json();
}

async function metric(name, labels) {
  const text = await (await fetch(`${HUB}/metrics`)).text();
  const series = `${name}{${Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .join(",")}}`;
  const line = text.split("\n").find((l) => l.startsWith(series + " "));
  return line === undefined ? 0 : Number(line.split(" ").pop());
}

/**
 * Poll `fn(arg)` in the page until it returns something truthy (no waitForFunction: the CSP).
 * A page that is navigating meanwhile (its context destroyed) is asked again on the next page.
 */
async function until(page, fn, arg, { timeout = 10_000, what = "condition" } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await page.evaluate(fn, arg);
    } catch (err) {
      if (!/Execution context was destroyed|navigat/i.test(String(err?.message))) throw err;
      last = null;
    }
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function openTab(name, path) {
  const page =
    name === "A" && context.pages().length === 1 && context.pages()[0].url() === "about:blank"
      ? context.pages()[0]
      : await context.newPage();
  await page.setViewportSize(VIEWPORT);
  page.on("console", (m) => {
    // A socket refused while the tab is offline is expected, and so is the thread list's poll
    // failing then (net::ERR_INTERNET_DISCONNECTED); anything else is a problem.
    const offline = /WebSocket connection .* failed|net::ERR_INTERNET_DISCONNECTED/;
    if (m.type() === "error" && !offline.test(m.text())) problems.push(`${name}: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`${name}: page error: ${e.message}`));
  await page.goto(HUB + path);
  await until(page, () => window.__hub?.client?.status === "open" && window.__hub.client.inSync, null, {
    what: `${path} to join`,
  });
  tabs[name] = page;
  return page;
}

/** What the page mirrors: `{seq, inSync, resyncs, snapshots, ...}` from its HubClient. */
function client(page) {
  return page.evaluate(() => {
    const c = window.__hub.client;
    return {
      seq: c.seq,
      status: c.status,
      inSync: c.inSync,
      resyncs: { ...c.resyncs },
      snapshots: { ...c.snapshots },
      reconnects: c.reconnects,
      closeCodes: [...c.closeCodes],
      connections: window.__hub.connections.map((x) => ({ ...x })),
    };
  });
}

/** The status bar's count of snapshots for `cause`, as the page shows it. */
function shownResyncs(page, cause) {
  return page.evaluate((c) => Number(document.querySelector(`[data-testid="resync-${c}"]`).dataset.count), cause);
}

/** The value at JSON Pointer `path` of `doc` (RFC 6901), or null where it does not resolve. */
function at(doc, path) {
  let node = doc;
  for (const token of path.split("/").slice(1)) {
    const key = token.replaceAll("~1", "/").replaceAll("~0", "~");
    if (node === null || typeof node !== "object" || !Object.hasOwn(node, key)) return null;
    node = node[key];
  }
  return node;
}

/**
 * What a client of `path` holds of `doc`: the whole of it (null), the subtree at one pointer,
 * or, for an array of them, their projection (docs/protocol.md: each subtree that resolves at
 * its place, ancestors as objects, nothing else).
 */
function heldOf(doc, path) {
  if (path === null) return doc;
  if (!Array.isArray(path)) return at(doc, path);
  const out = {};
  for (const pointer of path) {
    const tokens = pointer.split("/").slice(1).map((t) => t.replaceAll("~1", "/").replaceAll("~0", "~"));
    const parent = at(doc, pointer.split("/").slice(0, -1).join("/"));
    if (parent === null || typeof parent !== "object" || !Object.hasOwn(parent, tokens.at(-1))) continue;
    const value = at(doc, pointer);
    let node = out;
    for (const token of tokens.slice(0, -1)) node = node[token] ??= {};
    node[tokens.at(-1)] = value;
  }
  return out;
}

/**
 * Every page holds exactly the hub's state and messages at one same seq: GET the thread, wait
 * until each page has reached that seq, and compare what each held there (its history keeps the
 * dump of every seq it applied; a page that jumped over that seq by a snapshot is retried at the
 * next one). A page whose client holds a subtree (`path`) holds exactly that part of the hub's
 * state. Also checks each page's <pre> dump is the state it held at the dump's seq.
 */
async function assertConverged(pages, { timeout = 15_000 } = {}) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const hub = await getJson("/v1/threads/demo");
    const held = [];
    for (const page of pages) {
      await until(page, (s) => window.__hub.client.inSync && window.__hub.client.seq >= s, hub.seq, {
        what: `seq ${hub.seq}`,
      });
      held.push(await page.evaluate((s) => window.__hub.history.get(s) ?? null, hub.seq));
    }
    if (held.every((h) => h !== null)) {
      for (const [i, h] of held.entries()) {
        const path = await pages[i].evaluate(() => window.__hub.client.path);
        const state = heldOf(hub.state, path);
        assert.deepEqual(JSON.parse(h), { state, messages: hub.messages }, `tab ${i} at seq ${hub.seq}`);
      }
      for (const page of pages) {
        const dump = await page.evaluate(() => {
          const pre = document.querySelector('[data-testid="state-json"]');
          const seq = Number(pre.dataset.seq);
          return { seq, text: pre.textContent, held: window.__hub.history.get(seq) ?? null };
        });
        if (dump.held !== null) assert.deepEqual(JSON.parse(dump.text), JSON.parse(dump.held).state);
      }
      return hub;
    }
    if (Date.now() > deadline) throw new Error(`pages never held seq ${hub.seq} together`);
  }
}

async function shot(page, name, { fullPage = false } = {}) {
  const path = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path, fullPage });
  return path;
}

// -- the browser --------------------------------------------------------------------------------

before(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  profile = mkdtempSync(join(tmpdir(), "agui-hub-chromium-"));
  // A persistent context is how Playwright takes a user data dir: a fresh one per run.
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: VIEWPORT,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});

after(async () => {
  await context?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

// -- the tests ----------------------------------------------------------------------------------

test("three tabs watching the demo agent converge to the hub's state", async () => {
  const a = await openTab("A", "/demo/doc.html");
  await openTab("B", "/demo/doc.html");
  const c = await openTab("C", "/demo/dashboard.html");
  // The dashboard holds only what it draws, the series, the agent's status and two counters: it
  // subscribed with ?path= for each, so it holds their projection, and every delta it receives
  // is under one of them (with its own pointer: `/series/-`), nothing else.
  await c.evaluate(() => {
    window.__deltaPaths = [];
    window.__hub.client.on("event", (e) => e.type === "STATE_DELTA" && window.__deltaPaths.push(...e.delta.map((op) => op.path)));
  });
  const drawn = ["/series", "/status", "/counters/words", "/counters/sections"];
  assert.deepEqual(await c.evaluate(() => window.__hub.client.path), drawn);
  assert.deepEqual(new URL(await c.evaluate(() => window.__hub.client.socket.url)).searchParams.getAll("path"), drawn);
  assert.equal(await c.textContent('[data-testid="path"]'), drawn.join(" "));
  const first = await assertConverged([tabs.A, tabs.B, tabs.C]);
  // The chart follows the series as deltas arrive.
  const chartAt = () =>
    c.evaluate(() => ({
      values: document.querySelector('[data-testid="chart"]').dataset.values,
      series: JSON.stringify(window.__hub.client.state.series),
      latest: document.querySelector('[data-testid="figure-latest"] .figure-value').textContent,
    }));
  const before = await chartAt();
  assert.equal(before.values, JSON.parse(before.series).join(","));
  await until(c, (v) => document.querySelector('[data-testid="chart"]').dataset.values !== v, before.values, {
    what: "the chart to move",
  });
  const moved = await chartAt();
  assert.equal(moved.values, JSON.parse(moved.series).join(","));
  assert.equal(moved.latest, String(JSON.parse(moved.series).at(-1)), "the figures read the series too");
  const second = await assertConverged([tabs.A, tabs.B, tabs.C]);
  assert.ok(second.seq > first.seq, "the agent kept writing");
  const paths = await c.evaluate(() => window.__deltaPaths);
  assert.ok(paths.includes("/series/-"), `the series' appends arrived: ${paths.slice(0, 20)}`);
  assert.deepEqual(
    paths.filter((p) => !drawn.some((d) => p === d || p.startsWith(d + "/")) && p !== "/counters"),
    [],
    "no delta outside what it draws reached the dashboard",
  );
  const dumped = JSON.parse(await c.textContent('[data-testid="state-json"]'));
  assert.deepEqual(Object.keys(dumped).sort(), ["counters", "series", "status"]);
  assert.deepEqual(Object.keys(dumped.counters).sort(), ["sections", "words"], "no document, no other counter");
  // The four figures read outside the series show the agent's progress again.
  for (const name of ["step", "phase", "sections", "words"]) {
    const shown = await c.textContent(`[data-testid="figure-${name}"] .figure-value`);
    assert.notEqual(shown, "–", `figure ${name} is shown`);
    if (name !== "phase") assert.ok(Number.isInteger(Number(shown)), `figure ${name}: ${shown}`);
  }
  // Each tab joined once, with no repair.
  for (const page of [a, tabs.B, c]) {
    const held = await client(page);
    assert.deepEqual(held.snapshots, { join: 1 });
    assert.deepEqual(held.resyncs, {});
    assert.equal(await shownResyncs(page, "join"), 1);
  }
  await shot(c, "dashboard");
  const index = await context.newPage();
  await index.setViewportSize(VIEWPORT);
  await index.goto(`${HUB}/demo/`);
  await until(index, () => window.__hub?.client?.inSync && window.__hub.client.seq > 0, null, {
    what: "the index page",
  });
  assert.match(await index.textContent('[data-testid="summary"]'), /section\(s\)/);
  await shot(index, "index");
  await index.close();
});

test("a tab whose copy is corrupted detects the failed patch and recovers through a snapshot", async () => {
  const c = tabs.C;
  const hubBefore = await metric("agui_hub_resyncs_total", { cause: "patch_failed" });
  // The agent appends to /series in every delta, which reaches the dashboard (holding the
  // series at its place): with its copy of the series a string, the next one fails.
  await c.evaluate(() => window.__hub.client.mirror.corrupt("/series", "corrupted"));
  await until(c, () => window.__hub.client.snapshots.patch_failed === 1 && window.__hub.client.inSync, null, {
    what: "the repair snapshot",
  });
  const held = await client(c);
  assert.deepEqual(held.resyncs, { patch_failed: 1 }, "it asked once, with hub.resync patch_failed");
  assert.equal(await shownResyncs(c, "patch_failed"), 1, "and its status bar says so");
  assert.equal(await metric("agui_hub_resyncs_total", { cause: "patch_failed" }), hubBefore + 1);
  for (const page of [tabs.A, tabs.B]) {
    assert.deepEqual((await client(page)).resyncs, {}, "the other tabs noticed nothing");
    assert.equal(await shownResyncs(page, "patch_failed"), 0);
  }
  await assertConverged([tabs.A, tabs.B, c]);
  assert.ok(await c.evaluate(() => Array.isArray(window.__hub.client.state.series)));
  await shot(c, "dashboard-repaired");
});

test("a tab that goes offline and comes back resumes with since and gets a replay", async () => {
  const b = tabs.B;
  const joinsBefore = await metric("agui_hub_resyncs_total", { cause: "join" });
  const start = await client(b);
  const cdp = await context.newCDPSession(b);
  await cdp.send("Network.enable");
  const network = (offline) =>
    cdp.send("Network.emulateNetworkConditions", { offline, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
  await network(true);
  // The socket is dropped as a network failure would drop it; nothing reaches the tab meanwhile.
  await b.evaluate(() => window.__hub.client.disconnect());
  const away = await client(b);
  const hubAway = (await getJson("/v1/threads/demo")).seq;
  await new Promise((r) => setTimeout(r, 1500));
  const hubLater = (await getJson("/v1/threads/demo")).seq;
  assert.ok(hubLater > hubAway, "the agent wrote while the tab was away");
  await network(false);
  await until(
    b,
    (n) => window.__hub.client.reconnects === n + 1 && window.__hub.client.status === "open",
    start.reconnects,
    {
      what: "the reconnect",
    },
  );
  const hub = await assertConverged([tabs.A, b, tabs.C]);
  const back = await client(b);
  const resumed = back.connections[back.connections.length - 1];
  assert.equal(resumed.resumed, true, "the hub resumed the connection from the tab's position");
  assert.equal(resumed.since, away.seq, "it asked to resume from where it was cut off");
  assert.ok(resumed.head >= hubLater, "and the hub had the events written meanwhile to replay");
  assert.deepEqual(back.snapshots, start.snapshots, "no snapshot: a replay, not a new join");
  assert.equal(await metric("agui_hub_resyncs_total", { cause: "join" }), joinsBefore, "no join on the hub either");
  // The replay is every event after `since`, applied one by one.
  const seqs = await b.evaluate(
    ([from, to]) => {
      const missing = [];
      for (let s = from + 1; s <= to; s++) if (!window.__hub.history.has(s)) missing.push(s);
      return missing;
    },
    [resumed.since, Math.min(resumed.head, hub.seq)],
  );
  assert.deepEqual(seqs, [], "every replayed seq was applied");
  assert.match(await b.textContent('[data-testid="resumed"]'), /resumed from seq \d+, replayed \d+/);
  await cdp.detach();
});

test("two tabs editing the same field: one wins, the other sees a visible conflict and converges", async () => {
  const a = tabs.A;
  const b = tabs.B;
  const title = '[data-testid="doc-title"]';
  const original = await a.inputValue(title);
  assert.equal(await b.inputValue(title), original);
  const mine = { A: "Release notes, as tab A has it", B: "Release notes, as tab B has it" };
  // Both start from the same value, then save at the same moment.
  await a.fill(title, mine.A);
  await b.fill(title, mine.B);
  await Promise.all([a.press(title, "Enter"), b.press(title, "Enter")]);
  const outcome = async (page) =>
    until(
      page,
      (sel) => {
        const o = document.querySelector(sel).dataset.lastOutcome;
        return o && o !== "pending" ? o : null;
      },
      title,
      { what: "the hub's answer" },
    );
  const outcomes = { A: await outcome(a), B: await outcome(b) };
  assert.deepEqual(Object.values(outcomes).sort(), ["acked", "conflict"], JSON.stringify(outcomes));
  const winner = outcomes.A === "acked" ? "A" : "B";
  const loser = winner === "A" ? "B" : "A";
  // Everyone ends with the winner's title: both tabs and the hub.
  for (const page of [a, b]) {
    await until(page, ([sel, v]) => document.querySelector(sel).value === v, [title, mine[winner]], {
      what: "the winner's title",
    });
  }
  const hub = await assertConverged([a, b, tabs.C]);
  assert.equal(hub.state.title, mine[winner]);
  // The loser is told, in the page, what happened and what won; the winner is not.
  const notices = (page) => page.$$eval('[data-testid="conflict-notice"]', (n) => n.map((x) => x.textContent));
  const lost = await notices(tabs[loser]);
  assert.equal(lost.length, 1, "one conflict notice");
  assert.ok(lost[0].includes(mine[loser]) && lost[0].includes(mine[winner]), lost[0]);
  assert.ok(await tabs[loser].isVisible('[data-testid="conflict-notice"]'));
  assert.deepEqual(await notices(tabs[winner]), []);
  assert.equal((await client(tabs[loser])).snapshots.conflict, 1, "the loser was repaired with a snapshot");
  assert.equal(await shownResyncs(tabs[loser], "conflict"), 1);
  assert.equal((await client(tabs[winner])).snapshots.conflict, undefined);
  await shot(tabs[loser], "doc-conflict");
  await shot(tabs[loser], "doc-full", { fullPage: true });
});

test("a section edited in one tab shows in the other; state is rendered as text, never as markup", async () => {
  const a = tabs.A;
  const b = tabs.B;
  // A person edits the newest section's text in tab A and leaves the field: it is saved.
  const id = await a.evaluate(() => window.__hub.client.state.sections.at(-1).id);
  const text = `[data-section-id="${id}"] [data-testid="section-text"]`;
  // The agent keeps writing: a section rolled off meanwhile moves every index, and the hub
  // rightly refuses the edit (its guard tests the section's id at that index) as a conflict.
  // That is the page's conflict path (tested above); here the person saves again.
  const outcomes = [];
  for (let attempt = 0; attempt < 3 && outcomes.at(-1) !== "acked"; attempt++) {
    await a.evaluate((sel) => delete document.querySelector(sel).dataset.lastOutcome, text);
    await a.fill(text, `Rewritten in tab A. ${HOSTILE}`);
    await a.click('[data-testid="doc-title"]'); // blur: the change is committed
    const seen = await until(
      a,
      (sel) => {
        const o = document.querySelector(sel).dataset.lastOutcome;
        return o && o !== "pending" ? o : null;
      },
      text,
      { what: "the hub's answer to the save" },
    );
    outcomes.push(seen);
    if (seen !== "conflict") break;
  }
  assert.equal(outcomes.at(-1), "acked", `the save's outcomes: ${JSON.stringify(outcomes)}`);
  await until(b, ([sel, v]) => document.querySelector(sel)?.value === v, [text, `Rewritten in tab A. ${HOSTILE}`], {
    what: "tab B to show the edit",
  });
  assert.equal(await b.textContent(`[data-section-id="${id}"] [data-testid="section-by"]`), "by a person");
  // Anyone allowed to publish can put markup in the state: it is shown as text everywhere.
  const outcome = await a.evaluate(
    async ([hostile, sid]) => {
      const c = window.__hub.client;
      const i = c.state.sections.findIndex((s) => s.id === sid);
      return c.publish([{ op: "replace", path: `/sections/${i}/by`, value: hostile }], {
        test: { [`/sections/${i}/id`]: sid },
      });
    },
    [HOSTILE, id],
  );
  assert.equal(outcome.status, "acked", JSON.stringify(outcome));
  for (const page of [a, b]) {
    await until(
      page,
      ([sel, h]) => document.querySelector(sel)?.textContent === `by ${h}`,
      [`[data-section-id="${id}"] [data-testid="section-by"]`, HOSTILE],
      {
        what: "the markup, shown as text",
      },
    );
    assert.equal(await page.evaluate(() => document.querySelectorAll("main img, main b").length), 0);
    assert.ok((await page.textContent('[data-testid="state-json"]')).includes("<img"));
    assert.equal(await page.evaluate(() => window.__pwned), undefined);
  }
  await assertConverged([a, b, tabs.C]);
});

test("a message typed in one tab is answered by the agent, streamed into both tabs", async () => {
  const a = tabs.A;
  const b = tabs.B;
  const words = `hello from tab A ${Date.now()}`;
  const section = `Asked in the browser ${Date.now()}`;
  // Tab B records every assistant text it receives, so the reply is seen arriving in pieces.
  await b.evaluate(() => {
    window.__streamed = [];
    window.__hub.client.on("event", (e) => e.type === "TEXT_MESSAGE_CONTENT" && window.__streamed.push(e.messageId));
  });
  const conversation = (page) =>
    page.$$eval('[data-testid="conversation"] [data-testid="message"]', (items) =>
      items.map((li) => ({
        role: li.querySelector(".message-role").textContent,
        text: li.querySelector(".message-text").textContent,
      })),
    );
  await a.fill('[data-testid="ask-input"]', words);
  await a.press('[data-testid="ask-input"]', "Enter");
  const runId = await until(a, () => document.querySelector('[data-testid="ask-status"]').dataset.runId, null, {
    what: "the hub to start the run",
  });
  const reply = `You said “${words}”.`;
  for (const page of [a, b]) {
    await until(
      page,
      ([w, r]) => {
        const texts = document.querySelectorAll('[data-testid="conversation"] .message-text');
        const items = [...texts].map((x) => x.textContent);
        const i = items.indexOf(w);
        return i >= 0 && items.slice(i + 1).some((t) => t.startsWith(r));
      },
      [words, reply],
      { what: "the user's message and the agent's reply", timeout: 15_000 },
    );
    const shown = await conversation(page);
    const mine = shown.findIndex((m) => m.text === words);
    assert.equal(shown[mine].role, "user");
    assert.equal(shown.slice(mine + 1).find((m) => m.text.startsWith(reply)).role, "assistant");
  }
  // The reply streamed into B as several TEXT_MESSAGE_CONTENT events of one message.
  const pieces = await b.evaluate((id) => window.__streamed.filter((m) => m === `reply-${id}`).length, runId);
  assert.ok(pieces > 3, `the reply arrived in ${pieces} piece(s)`);
  await until(a, () => document.querySelector('[data-testid="ask-status"]').dataset.state === "idle", null, {
    what: "the run to end",
  });
  // The agent may also edit the document: `section: ...` adds one, in both tabs.
  await b.fill('[data-testid="ask-input"]', `section: ${section}`);
  await b.click('[data-testid="ask-send"]');
  for (const page of [a, b]) {
    await until(
      page,
      (t) => [...document.querySelectorAll('[data-testid="section-title"]')].some((x) => x.value === t),
      section,
      { what: "the agent's new section", timeout: 15_000 },
    );
  }
  const hub = await assertConverged([a, b, tabs.C]);
  assert.ok(hub.state.sections.some((s) => s.title === section && s.by === "agent"));
  assert.ok(hub.messages.some((m) => m.role === "user" && m.content === words));
  // The README's picture: the document, its threads and who is here, a question and its reply.
  const path = await shot(a, "doc-ask");
  if (README_SHOT) copyFileSync(path, README_SHOT);
});

test("the operator board renders a receipts board and follows its deltas", async () => {
  const fixture = JSON.parse(readFileSync(process.env.AGUI_BOARD_FIXTURE, "utf8"));
  const board = await context.newPage();
  board.on("pageerror", (e) => problems.push(`board: page error: ${e.message}`));
  board.on("console", (m) => m.type() === "error" && problems.push(`board: ${m.text()}`));
  await board.goto(`${HUB}/demo/board.html?thread=${BOARD_THREAD}`);
  await until(board, () => window.__hub?.client?.inSync, null, { what: "the board to join" });
  // The board thread is an ordinary thread: seed it as any writer could (a whole snapshot).
  const seeded = await board.evaluate((snapshot) => window.__hub.client.replaceState(snapshot), fixture);
  assert.equal(seeded.status, "acked", JSON.stringify(seeded));
  const ids = Object.keys(fixture.operations);
  await until(board, (n) => document.querySelectorAll('[data-testid="operation"]').length === n, ids.length, {
    what: "the operations",
  });
  for (const [state, n] of Object.entries(fixture.counts)) {
    assert.equal(await board.getAttribute(`[data-testid="count-${state}"]`, "data-count"), String(n), state);
  }
  const rows = await board.$$eval('[data-testid="operation"]', (r) => r.map((x) => [x.dataset.id, x.dataset.state]));
  assert.deepEqual(rows.map(([id]) => id).sort(), [...ids].sort());
  assert.equal(rows[0][1], "stuck", "operations needing attention come first");
  assert.equal(await board.textContent('[data-testid="as-of"]'), fixture.as_of);
  // Untrusted text stays text: the fixture's hostile reason is shown literally.
  const hostile = ids.find((id) => String(fixture.operations[id].reason).includes("<img"));
  assert.ok(hostile, "the fixture carries markup in a reason");
  assert.equal(
    await board.textContent(`[data-testid="operation"][data-id="${hostile}"] [data-column="reason"]`),
    fixture.operations[hostile].reason,
  );
  assert.equal(await board.evaluate(() => document.querySelectorAll("table img, table b").length), 0);
  // A delta (an operation accepted: pending -> working) moves the row and the counts.
  const pending = ids.find((id) => fixture.operations[id].state === "pending");
  const delta = [
    { op: "replace", path: `/operations/${pending}/state`, value: "working" },
    { op: "replace", path: "/counts/pending", value: fixture.counts.pending - 1 },
    { op: "replace", path: "/counts/working", value: fixture.counts.working + 1 },
  ];
  const moved = await board.evaluate((ops) => window.__hub.client.publish(ops), delta);
  assert.equal(moved.status, "acked");
  await until(
    board,
    (id) => document.querySelector(`[data-testid="operation"][data-id="${id}"]`)?.dataset.state === "working",
    pending,
    {
      what: "the row to move",
    },
  );
  assert.equal(
    await board.getAttribute('[data-testid="count-working"]', "data-count"),
    String(fixture.counts.working + 1),
  );
  await shot(board, "board", { fullPage: true });
  // The hub's own `ops` board thread (fed by the receipts store), when it has operations.
  const ops = await getJson("/v1/threads/ops");
  const real = ops.state && typeof ops.state.operations === "object" ? Object.keys(ops.state.operations).length : 0;
  if (real > 0) {
    await board.goto(`${HUB}/demo/board.html`);
    await until(board, (n) => document.querySelectorAll('[data-testid="operation"]').length === n, real, {
      what: "the ops board",
    });
    await shot(board, "board-ops", { fullPage: true });
  }
  await board.close();
});

/** The people a document tab shows in "who is here": `[{id, name, self}]`, in its order. */
function shownMembers(page) {
  return page.$$eval('[data-testid="member"]', (items) =>
    items.map((li) => ({ id: li.dataset.memberId, name: li.dataset.name, self: li.dataset.self === "true" })),
  );
}

/** Wait until `page` shows exactly the members named `names` (any order). */
async function untilMembers(page, names, what) {
  return until(
    page,
    (want) => {
      const shown = [...document.querySelectorAll('[data-testid="member"]')].map((li) => li.dataset.name).sort();
      return JSON.stringify(shown) === JSON.stringify(want);
    },
    [...names].sort(),
    { what },
  );
}

test("two tabs on the document see each other in who is here, renamed, and one leaving", async () => {
  const a = tabs.A;
  const b = tabs.B;
  const self = async (page) => (await shownMembers(page)).find((m) => m.self);
  const [meA, meB] = [await self(a), await self(b)];
  assert.ok(meA && meB, "each tab shows itself");
  assert.match(meA.name, /^Guest \d{3}$/);
  assert.notEqual(meA.id, meB.id, "one member per tab");
  // Each sees the other, and both show what the hub holds (the dashboard, which did not ask to
  // be shown, is not a member).
  await untilMembers(a, [meA.name, meB.name], "tab A to show both tabs");
  await untilMembers(b, [meA.name, meB.name], "tab B to show both tabs");
  const hubMembers = async () => (await getJson("/v1/threads/demo/presence")).members;
  assert.deepEqual((await hubMembers()).map((m) => m.id).sort(), [meA.id, meB.id].sort());
  assert.deepEqual(
    (await shownMembers(b)).filter((m) => !m.self).map((m) => m.id),
    [meA.id],
  );
  // A third tab comes, and renames itself: everyone sees it come and take the new name.
  const d = await openTab("D", "/demo/doc.html");
  const meD = await until(d, () => document.querySelector('[data-testid="member"][data-self]')?.dataset.name, null, {
    what: "tab D to show itself",
  });
  await untilMembers(a, [meA.name, meB.name, meD], "tab A to see tab D come");
  const renamed = `Tester ${Date.now() % 100000}`;
  await d.fill('[data-testid="name-input"]', renamed);
  await d.press('[data-testid="name-input"]', "Enter");
  for (const page of [a, b, d]) await untilMembers(page, [meA.name, meB.name, renamed], "the new name everywhere");
  assert.ok((await hubMembers()).some((m) => m.name === renamed), "the hub holds the new name");
  // The name is the tab's: a reload keeps it (sessionStorage) and shows it from the join on.
  await d.reload();
  await until(d, (n) => document.querySelector('[data-testid="member"][data-self]')?.dataset.name === n, renamed, {
    what: "the reloaded tab to keep its name",
  });
  assert.equal(await d.inputValue('[data-testid="name-input"]'), renamed);
  await shot(a, "doc-who-is-here");
  // Tab D leaves: the others see it go, and so does the hub.
  await d.close();
  for (const page of [a, b]) await untilMembers(page, [meA.name, meB.name], "tab D to be gone");
  assert.ok(!(await hubMembers()).some((m) => m.name === renamed));
});

test("the thread list: another thread shows, opens, is renamed and deleted from the page", async () => {
  const scratch = `scratch-${Date.now()}`;
  // Another thread of the tenant, written as docs/http.md writes one: a run of the demo agent.
  const started = await fetch(`${HUB}/v1/threads/${scratch}/runs`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ agent: "demo", messages: [{ id: "u1", role: "user", content: "hi" }] }),
  });
  assert.ok(started.ok, `POST runs: ${started.status}`);
  const listed = async () => (await getJson("/v1/threads?limit=200")).threads;
  assert.ok((await listed()).some((t) => t.id === scratch));
  const ids = (page) =>
    page.evaluate(() => (document.querySelector('[data-testid="threads"]').dataset.ids ?? "").split(","));
  const e = await openTab("E", "/demo/doc.html");
  await until(e, (id) => document.querySelector('[data-testid="threads"]').dataset.ids?.split(",").includes(id), scratch, {
    what: "the list to show the new thread",
  });
  const shown = await ids(e);
  assert.ok(shown.includes("demo") && shown.includes(scratch), shown.join(","));
  // The same threads as the hub lists (the order moves as the agent writes to both).
  assert.deepEqual([...shown].sort(), (await listed()).map((t) => t.id).sort());
  assert.equal(await e.getAttribute('[data-testid="thread-item"][data-id="demo"] a', "aria-current"), "page");
  // Open it: the page follows that thread, the list marks it open.
  const item = `[data-testid="thread-item"][data-id="${scratch}"]`;
  await e.click(`${item} [data-testid="thread-open"]`);
  await until(e, (id) => window.__hub?.client?.thread === id && window.__hub.client.inSync, scratch, {
    what: "the page to open the other thread",
  });
  assert.equal(new URL(e.url()).searchParams.get("thread"), scratch);
  await until(e, (sel) => document.querySelector(sel)?.getAttribute("aria-current") === "page", `${item} a`, {
    what: "the list to mark it open",
  });
  // A tab that stays on it sees it deleted from elsewhere.
  const f = await openTab("F", `/demo/doc.html?thread=${scratch}`);
  // Rename it from the page: the hub lists the new name; tab A's list shows it by its next poll.
  const name = `Scratch notes ${Date.now() % 100000}`;
  await e.click(`${item} [data-testid="thread-rename"]`);
  await e.fill(`${item} [data-testid="thread-name-input"]`, name);
  await e.press(`${item} [data-testid="thread-name-input"]`, "Enter");
  await until(e, ([sel, n]) => document.querySelector(sel)?.dataset.name === n, [item, name], { what: "the new name" });
  // The list may show the name (its poll) before the page has the PATCH's answer; the page
  // takes no delete while a rename is in flight (data-busy), so wait for the answer.
  await until(e, () => document.querySelector('[data-testid="threads"]').dataset.busy === undefined, null, {
    what: "the rename to be answered",
  });
  assert.equal((await listed()).find((t) => t.id === scratch).name, name);
  assert.equal(await e.textContent(`${item} [data-testid="thread-open"]`), name);
  // The outcome stays said after the list is fetched again (the rename's own refresh, then polls).
  const status = () => e.textContent('[data-testid="threads-status"]');
  const fetched = async () => Number(await e.getAttribute('[data-testid="threads"]', "data-loaded"));
  const after = await fetched();
  await until(e, (n) => Number(document.querySelector('[data-testid="threads"]').dataset.loaded) > n, after, {
    what: "the list to be fetched again",
    timeout: 15_000,
  });
  assert.equal(await status(), `Renamed ${scratch}.`);
  assert.match(await e.textContent('[data-testid="threads-summary"]'), /^\d+ thread\(s\)/);
  await until(tabs.A, ([sel, n]) => document.querySelector(sel)?.dataset.name === n, [item, name], {
    what: "tab A's list to show the new name",
  });
  await shot(e, "doc-threads");
  // Delete it: a dismissed confirm deletes nothing.
  e.once("dialog", (dialog) => dialog.dismiss());
  await e.click(`${item} [data-testid="thread-delete"]`);
  await until(e, () => document.querySelector('[data-testid="threads-status"]').textContent === "Not deleted.", null, {
    what: "the refusal",
  });
  assert.ok((await listed()).some((t) => t.id === scratch), "still there");
  let question = "";
  e.once("dialog", (dialog) => {
    question = dialog.message();
    dialog.accept();
  });
  await e.click(`${item} [data-testid="thread-delete"]`);
  // The open thread went: this tab says so, then opens another; so does the tab that stayed on it.
  const said = (page) =>
    until(
      page,
      () => {
        const b = document.querySelector('[data-testid="thread-gone"]');
        return b.hidden ? null : { text: b.textContent, next: b.dataset.next };
      },
      null,
      { what: "the page to say its thread was deleted" },
    );
  const banners = await Promise.all([said(e), said(f)]);
  for (const [page, by, banner] of [
    [e, "from this tab", banners[0]],
    [f, "elsewhere", banners[1]],
  ]) {
    assert.ok(banner.text.includes(scratch) && banner.text.includes(`deleted ${by}`), banner.text);
    assert.notEqual(banner.next, scratch);
    await until(page, (next) => window.__hub?.client?.thread === next && window.__hub.client.inSync, banner.next, {
      what: "the page to open another thread",
    });
  }
  assert.ok(question.includes(scratch) && question.includes("open here"), question);
  // Gone from the store: not listed, and read as a thread nobody wrote (docs/http.md).
  assert.ok(!(await listed()).some((t) => t.id === scratch));
  const { threadId, epoch, seq, state, messages, run } = await getJson(`/v1/threads/${scratch}`);
  assert.deepEqual(
    { threadId, epoch, seq, state, messages, run },
    { threadId: scratch, epoch: null, seq: 0, state: {}, messages: [], run: null },
  );
  const again = await fetch(`${HUB}/v1/threads/${scratch}`, { method: "DELETE" });
  assert.equal(again.status, 404);
  for (const page of [tabs.A, e]) {
    await until(page, (id) => !document.querySelector('[data-testid="threads"]').dataset.ids?.split(",").includes(id), scratch, {
      what: "the lists to drop it",
    });
  }
  await e.close();
  await f.close();
});

test("no page broke its CSP or threw", () => {
  assert.deepEqual(problems, []);
});
