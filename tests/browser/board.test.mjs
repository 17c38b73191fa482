// The operator board page (/demo/board.html) in a real browser: Debian's Chromium, headless,
// driven by playwright-core (which never downloads a browser). Run through pytest
// (tests/browser/test_board_page.py), which starts a hub with a token key and
// --trace-url 'https://traces.example/t/{trace_id}', ingests receipts, and passes:
//
//   AGUI_HUB_URL        http://127.0.0.1:PORT of that hub
//   AGUI_BOARD_EXPECT   a JSON file: the receipts:read token, the page size, and what the page
//                       must show (counts, the orphaned operations newest change first, ...)
//   CHROMIUM            the browser (default /usr/bin/chromium)
//   AGUI_ARTIFACTS      where screenshots go (default: test-artifacts/screenshots)
//
// The tests run in order on one tab. Everything is read from what the page shows (text,
// attributes), and the page's own requests to GET /v1/receipts/operations are checked against
// the same queries made here.

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

const HUB = process.env.AGUI_HUB_URL;
const EXPECT_FILE = process.env.AGUI_BOARD_EXPECT;
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const VIEWPORT = { width: 1280, height: 900 };
const ARTIFACTS = process.env.AGUI_ARTIFACTS ?? join(resolve(dirname(fileURLToPath(import.meta.url)), "../.."), "test-artifacts", "screenshots");
const API = "/v1/receipts/operations";

if (!HUB || !EXPECT_FILE) throw new Error("AGUI_HUB_URL / AGUI_BOARD_EXPECT are not set: run through pytest");
const expect = JSON.parse(readFileSync(EXPECT_FILE, "utf8"));
const TOTAL = Object.keys(expect.states).length;
/** The states in the order board.js lists them (attention first). */
const ORDER = ["stuck", "failed_outcome", "uncertain", "orphaned", "waiting", "working", "pending", "verified"];

let context;
let profile;
let page;
/** Console errors and page errors of the tab (CSP violations show up here). */
const problems = [];
/** The page's requests to the receipts queries: {url, authorization}. */
const queries = [];

// -- helpers ------------------------------------------------------------------------------------

/** Poll `fn(arg)` in the page until it returns something truthy (no waitForFunction: the CSP). */
async function until(tab, fn, arg, { timeout = 10_000, what = "condition" } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    last = await tab.evaluate(fn, arg);
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A receipts query as the page's token allows it. */
async function query(path) {
  const response = await fetch(HUB + path, {
    headers: { Authorization: `Bearer ${expect.token}` },
    signal: AbortSignal.timeout(10_000),
  });
  assert.equal(response.status, 200, `GET ${path}`);
  return response.json();
}

/** The table as the page shows it: one {id, state, cells} per row. */
function table(tab = page) {
  return tab.evaluate(() =>
    [...document.querySelectorAll('[data-testid="operations"] [data-testid="operation"]')].map((tr) => ({
      id: tr.querySelector('[data-testid="open-operation"]').textContent,
      dataId: tr.dataset.id,
      state: tr.querySelector('[data-column="state"]').textContent,
      artifact: tr.querySelector('[data-column="expected_artifact"]').textContent,
    })),
  );
}

/** The pager and the filter note as shown. */
function pager() {
  return page.evaluate(() => {
    const by = (id) => document.querySelector(`[data-testid="${id}"]`);
    return {
      hidden: by("pager").hidden,
      newer: by("newer").disabled,
      older: by("older").disabled,
      filter: by("filter").textContent,
      empty: !by("no-operations").hidden,
    };
  });
}

/** Wait until the table shows exactly `ids` (in order), then return the pager. */
async function showsPage(ids, what) {
  await until(
    page,
    (want) => {
      const rows = [...document.querySelectorAll('[data-testid="operations"] [data-testid="open-operation"]')];
      return rows.length === want.length && rows.every((b, i) => b.textContent === want[i]);
    },
    ids,
    { what },
  );
  return pager();
}

async function click(testid) {
  await page.click(`[data-testid="${testid}"]`, { timeout: 5_000 });
}

/** The history panel, as shown: title, summary, and per attempt its receipts and actions. */
function historyShown(tab = page) {
  return tab.evaluate(() => {
    const box = document.querySelector('[data-testid="history"]');
    return {
      hidden: box.hidden,
      title: box.querySelector("h2")?.textContent ?? "",
      state: box.querySelector('[data-testid="history-state"]')?.textContent ?? "",
      text: box.textContent,
      attempts: [...box.querySelectorAll('[data-testid="attempt"]')].map((a) => ({
        title: a.querySelector("h3").textContent,
        receipts: [...a.querySelectorAll('[data-testid="history-receipt"]')].map((tr) => ({
          event: tr.dataset.event,
          cells: [...tr.children].map((td) => td.textContent),
          links: [...tr.querySelectorAll("a")].map((l) => ({
            testid: l.dataset.testid,
            href: l.getAttribute("href"),
            text: l.textContent,
            target: l.getAttribute("target"),
            rel: l.getAttribute("rel"),
          })),
        })),
        actions: [...a.querySelectorAll("li")].map((li) => li.textContent),
      })),
    };
  });
}

async function openHistory(id, tab = page) {
  await tab.click(`[data-testid="operation"][data-id="${id}"] [data-testid="open-operation"]`, { timeout: 5_000 });
  await until(
    tab,
    (want) => {
      const box = document.querySelector('[data-testid="history"]');
      return !box.hidden && box.querySelector("h2")?.textContent === `Operation ${want}` && !/loading…/.test(box.textContent);
    },
    id,
    { what: `the history of ${id}` },
  );
  return historyShown(tab);
}

/**
 * How the operations table sits in its box at the tab's viewport: the box's and the page's
 * widths, and per row and column the text as rendered (innerText, white space collapsed),
 * whether the cell's content overflows it, and whether the text lies within the cell and the
 * cell within the box (nothing cut off or scrolled out of sight).
 */
function tableLayout(tab = page) {
  return tab.evaluate(() => {
    const box = document.querySelector('[data-testid="operations"]').closest(".table-box");
    const edge = box.getBoundingClientRect();
    const within = (inner, outer) => inner.left >= outer.left - 0.5 && inner.right <= outer.right + 0.5;
    const cell = (td) => {
      const rect = td.getBoundingClientRect();
      const range = document.createRange();
      range.selectNodeContents(td);
      return {
        text: td.innerText.replace(/\s+/g, " ").trim(),
        overflows: td.scrollWidth > td.clientWidth,
        inside: [...range.getClientRects()].every((line) => within(line, rect)) && within(rect, edge),
      };
    };
    const root = document.documentElement;
    return {
      box: { scrollWidth: box.scrollWidth, clientWidth: box.clientWidth },
      page: { scrollWidth: root.scrollWidth, clientWidth: root.clientWidth },
      rows: [...document.querySelectorAll('[data-testid="operations"] [data-testid="operation"]')].map((tr) => ({
        id: tr.dataset.id,
        updatedAt: window.__hub.client.state.operations[tr.dataset.id]?.updated_at,
        cells: Object.fromEntries([...tr.children].map((td) => [td.dataset.column, cell(td)])),
      })),
    };
  });
}

function watch(tab, name, sink) {
  tab.on("console", (m) => {
    if (m.type() === "error") sink.push(`${name}: console: ${m.text()} (${m.location().url})`);
  });
  tab.on("pageerror", (e) => sink.push(`${name}: page error: ${e.message}`));
}

async function openBoard(name, sink) {
  const tab = await context.newPage();
  await tab.setViewportSize(VIEWPORT);
  watch(tab, name, sink);
  tab.on("request", (r) => {
    if (new URL(r.url()).pathname === API) queries.push({ url: r.url(), authorization: r.headers().authorization });
  });
  await tab.goto(`${HUB}/demo/board.html#token=${encodeURIComponent(expect.token)}`, { timeout: 10_000 });
  await until(
    tab,
    (records) => window.__hub?.client?.status === "open" && window.__hub.client.inSync && window.__hub.client.state?.records === records,
    expect.records,
    { what: "the board to join and reflect every record" },
  );
  return tab;
}

// -- the browser --------------------------------------------------------------------------------

before(async () => {
  profile = mkdtempSync(join(tmpdir(), "agui-hub-chromium-"));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: VIEWPORT,
    timeout: 30_000,
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
  page = await openBoard("board", problems);
});

after(async () => {
  await context?.close();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

// -- the tests ----------------------------------------------------------------------------------

test("the counts by state, and the board's table, attention first", async () => {
  const shown = await page.evaluate(() =>
    [...document.querySelectorAll('[data-testid="counts"] .count')].map((b) => ({
      testid: b.dataset.testid,
      label: b.querySelector(".figure-label").textContent,
      value: b.querySelector(".count-value").textContent,
      pressed: b.getAttribute("aria-pressed"),
    })),
  );
  assert.deepEqual(
    shown,
    ORDER.map((state) => ({
      testid: `count-${state}`,
      label: state.replace(/_/g, " "),
      value: String(expect.counts[state] ?? 0),
      pressed: "false",
    })),
  );
  const rows = await table();
  assert.equal(rows.length, TOTAL, "every operation is listed (each state is under the board's cap)");
  assert.deepEqual(Object.fromEntries(rows.map((r) => [r.id, r.state])), expect.states);
  for (const row of rows) assert.equal(row.dataId, row.id);
  const ranks = rows.map((r) => ORDER.indexOf(r.state));
  assert.deepEqual(ranks, [...ranks].sort((a, b) => a - b), "attention first");
  const orphans = rows.filter((r) => r.state === "orphaned").map((r) => r.id);
  assert.deepEqual(orphans, [...orphans].sort(), "ids in order within a state");
  const p = await pager();
  assert.equal(p.hidden, true);
  assert.equal(p.filter, `(${TOTAL} listed)`);
  assert.equal(p.empty, false);
  const legend = await page.evaluate(() => document.querySelector('[data-testid="legend"]').children.length);
  assert.equal(legend, ORDER.length);
});

test("the table fits at 1280, 1024 and 800 px: no sideways scroll, every time shown whole, long ids and artifacts wrapped", async () => {
  const [pendingLong, waitingLong] = Object.keys(expect.long);
  try {
    for (const width of [1280, 1024, 800]) {
      await page.setViewportSize({ width, height: 800 });
      const shown = await tableLayout();
      if (width === 1280) {
        mkdirSync(ARTIFACTS, { recursive: true });
        await page.screenshot({ path: join(ARTIFACTS, "board-1280.png") });
        await page.evaluate((id) => document.querySelector(`[data-testid="operation"][data-id="${id}"]`).scrollIntoView({ block: "center" }), pendingLong);
        await page.screenshot({ path: join(ARTIFACTS, "board-1280-long.png") });
        await page.evaluate(() => window.scrollTo(0, 0));
      }
      const at = `${width} px`;
      assert.equal(shown.rows.length, TOTAL, at);
      assert.ok(
        shown.box.scrollWidth <= shown.box.clientWidth,
        `${at}: the table scrolls sideways: ${shown.box.scrollWidth} px in a ${shown.box.clientWidth} px box`,
      );
      assert.ok(shown.page.scrollWidth <= shown.page.clientWidth, `${at}: the page scrolls sideways: ${JSON.stringify(shown.page)}`);
      for (const row of shown.rows) {
        const time = row.updatedAt;
        assert.match(time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/, `${row.id}: an RFC 3339 time`);
        const updated = row.cells.updated_at;
        assert.ok([time, time.replace("T", " ")].includes(updated.text), `${at}, ${row.id}: updated shows ${JSON.stringify(updated.text)} for ${time}`);
        for (const [column, c] of Object.entries(row.cells)) {
          assert.deepEqual({ overflows: c.overflows, inside: c.inside }, { overflows: false, inside: true }, `${at}, ${row.id}: ${column} cut off`);
        }
      }
      // The long ids and artifacts are there in full (wrapped, not cut or elided).
      const cells = Object.fromEntries(shown.rows.map((r) => [r.id, r.cells]));
      for (const [id, artifact] of Object.entries(expect.long)) {
        assert.equal(cells[id]?.id.text, id, at);
        assert.equal(cells[id].expected_artifact.text, artifact, at);
      }
    }
    // An operation's history (long artifact, long reason) fits its panel too.
    await page.setViewportSize({ width: 1280, height: 800 });
    await openHistory(waitingLong);
    const history = await page.evaluate(() => {
      const box = document.querySelector('[data-testid="history"]');
      box.scrollIntoView();
      return {
        panel: [box.scrollWidth, box.clientWidth],
        tables: [...box.querySelectorAll(".table-box")].map((t) => [t.scrollWidth, t.clientWidth]),
        page: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
      };
    });
    await page.screenshot({ path: join(ARTIFACTS, "board-1280-history.png") });
    assert.equal(history.tables.length, 1);
    for (const [scroll, client] of [history.panel, ...history.tables, history.page]) {
      assert.ok(scroll <= client, `the history scrolls sideways: ${JSON.stringify(history)}`);
    }
    await page.click('[data-testid="history"] .history-head button', { timeout: 5_000 });
  } finally {
    await page.setViewportSize(VIEWPORT);
    await page.evaluate(() => window.scrollTo(0, 0));
  }
});

test("untrusted text from a receipt is shown as text, never as markup", async () => {
  const { id, artifact } = expect.hostile;
  assert.match(artifact, /<img/);
  const row = (await table()).find((r) => r.id === id);
  assert.equal(row?.artifact, artifact);
  const dom = await page.evaluate((want) => {
    const cell = document.querySelector(`[data-testid="operation"][data-id="${want}"] [data-column="expected_artifact"]`);
    return {
      children: cell.children.length,
      html: cell.innerHTML,
      images: document.querySelectorAll("img").length,
      bold: document.querySelectorAll("main b").length,
      pwned: window.__pwned ?? null,
    };
  }, id);
  assert.deepEqual(
    { children: dom.children, images: dom.images, bold: dom.bold, pwned: dom.pwned },
    { children: 0, images: 0, bold: 0, pwned: null },
  );
  assert.match(dom.html, /&lt;img\/src=x\/onerror=window\.__pwned=1&gt;&lt;b&gt;bold&lt;\/b&gt;&amp;amp;/);
  // In the operation's history too (the delegated receipt names its artifact).
  const history = await openHistory(id);
  assert.match(history.state, /^stuck /);
  assert.deepEqual(
    history.attempts.map((a) => a.receipts.map((r) => r.event)),
    [["delegated", "accepted"]],
  );
  assert.equal(history.attempts[0].receipts[0].cells[3], artifact);
  const after = await page.evaluate(() => ({
    images: document.querySelectorAll("img").length,
    bold: document.querySelectorAll("main b").length,
    pwned: window.__pwned ?? null,
  }));
  assert.deepEqual(after, { images: 0, bold: 0, pwned: null });
});

test("a count filters the table, and newer/older page through the state", async () => {
  const size = expect.page;
  const all = expect.orphaned;
  assert.ok(all.length > 2 * size, "the fixture has more than two pages of orphaned operations");
  const pages = [all.slice(0, size), all.slice(size, 2 * size), all.slice(2 * size)];
  const from = queries.length;

  await click("count-orphaned");
  assert.equal(await page.getAttribute('[data-testid="count-orphaned"]', "aria-pressed"), "true");
  let p = await showsPage(pages[0], "the first page of orphaned");
  assert.deepEqual(
    { hidden: p.hidden, newer: p.newer, older: p.older },
    { hidden: false, newer: true, older: false },
  );
  assert.equal(
    p.filter,
    `(orphaned: ${size} on this page of ${all.length}, newest change first; click the count again for the board)`,
  );
  assert.ok((await table()).every((r) => r.state === "orphaned"));

  await click("older");
  p = await showsPage(pages[1], "the second page");
  assert.deepEqual({ newer: p.newer, older: p.older }, { newer: false, older: false });
  await click("older");
  p = await showsPage(pages[2], "the last page");
  assert.deepEqual({ newer: p.newer, older: p.older }, { newer: false, older: true });
  assert.match(p.filter, new RegExp(`^\\(orphaned: ${pages[2].length} on this page of ${all.length},`));
  await click("newer");
  p = await showsPage(pages[1], "the second page again");
  await click("newer");
  p = await showsPage(pages[0], "the first page again");
  assert.deepEqual({ newer: p.newer, older: p.older }, { newer: true, older: false });
  // A double click moves one page, not two (the second click comes while the page loads),
  // and one "newer" brings the first page back.
  await page.dblclick('[data-testid="older"]', { timeout: 5_000 });
  p = await showsPage(pages[1], "one page on after a double click");
  await click("newer");
  p = await showsPage(pages[0], "the first page after one newer");
  assert.deepEqual({ newer: p.newer, older: p.older }, { newer: true, older: false });

  // The page's own requests: GET /v1/receipts/operations?state=orphaned&limit=PAGE, each older
  // one with the cursor the previous answer gave, with the token, and the same answers here.
  const made = queries.slice(from).map((q) => ({ ...q, params: Object.fromEntries(new URL(q.url).searchParams) }));
  assert.ok(made.length >= 5, `the page asked ${made.length} times`);
  for (const q of made) {
    assert.equal(q.authorization, `Bearer ${expect.token}`);
    assert.equal(q.params.state, "orphaned");
    assert.equal(q.params.limit, String(size));
  }
  const answers = [];
  let cursor = null;
  for (const want of pages) {
    const body = await query(`${API}?state=orphaned&limit=${size}${cursor ? `&cursor=${cursor}` : ""}`);
    assert.deepEqual(
      body.operations.map((op) => op.operation_id),
      want,
    );
    answers.push(cursor);
    cursor = body.next;
  }
  assert.equal(cursor, null, "the last page has no next cursor");
  const cursors = made.map((q) => q.params.cursor ?? null);
  for (const c of answers) assert.ok(cursors.includes(c), `the page asked for cursor ${c}`);
  assert.ok(cursors.every((c) => answers.includes(c)), "every cursor the page used was one the hub gave");

  // Another count switches the filter; the same count again gives the board back.
  await click("count-stuck");
  await showsPage([expect.hostile.id], "the stuck operations");
  assert.equal(await page.getAttribute('[data-testid="count-orphaned"]', "aria-pressed"), "false");
  assert.equal(await page.getAttribute('[data-testid="count-stuck"]', "aria-pressed"), "true");
  p = await pager();
  assert.deepEqual({ newer: p.newer, older: p.older }, { newer: true, older: true });
  await click("count-stuck");
  await until(page, (n) => document.querySelectorAll('[data-testid="operation"]').length === n, TOTAL, {
    what: "the board again",
  });
  p = await pager();
  assert.equal(p.hidden, true);
  assert.equal(p.filter, `(${TOTAL} listed)`);
});

test("an operation's history: attempts, receipts, actions, trace links", async () => {
  const { id, attempts } = expect.retry;
  const shown = await openHistory(id);
  assert.equal(shown.hidden, false);
  assert.equal(shown.title, `Operation ${id}`);
  assert.match(shown.state, /^working /);
  assert.match(shown.text, new RegExp(`${attempts.reduce((n, a) => n + a.events.length + a.actions.length, 0)} records`));
  assert.deepEqual(
    shown.attempts.map((a) => a.title),
    attempts.map((a) => `handoff ${a.handoff_id}`),
  );
  for (const [i, want] of attempts.entries()) {
    const got = shown.attempts[i];
    assert.deepEqual(
      got.receipts.map((r) => r.event),
      want.events,
    );
    assert.deepEqual(
      got.receipts.map((r) => r.links),
      want.traces.map((trace) => [
        {
          testid: "trace-link",
          href: expect.trace_url.replace("{trace_id}", encodeURIComponent(trace)),
          text: trace,
          target: "_blank",
          rel: "noopener noreferrer",
        },
      ]),
    );
    assert.equal(got.actions.length, want.actions.length);
    for (const [j, text] of want.actions.entries()) assert.ok(got.actions[j].endsWith(text), got.actions[j]);
  }
  // The fixture's operations open too, each with its state.
  for (const [op, state] of Object.entries(expect.states).filter(([op]) => /^op-10\d$/.test(op))) {
    const h = await openHistory(op);
    assert.match(h.state, new RegExp(`^${state} `), op);
    const links = h.attempts.flatMap((a) => a.receipts.flatMap((r) => r.links));
    assert.ok(links.length > 0 && links.every((l) => l.href === expect.trace_url.replace("{trace_id}", l.text)), op);
  }
  await page.click('[data-testid="history"] .history-head button', { timeout: 5_000 });
  assert.equal(await page.evaluate(() => document.querySelector('[data-testid="history"]').hidden), true);
});

test("trace links URL-encode the trace id, and take only http(s) templates", async () => {
  // Trace ids from the hub are 32 hex digits (nothing to encode): the page's own function shows
  // what it does with anything else.
  const got = await page.evaluate(async (template) => {
    const { traceLink } = await import("/demo/board.js");
    return {
      odd: traceLink(template, "a b/c?d#e&f%"),
      script: traceLink("javascript:alert(1)//{trace_id}", "x"),
      none: traceLink(template, ""),
      noPlaceholder: traceLink("https://traces.example/t/", "x"),
    };
  }, expect.trace_url);
  assert.deepEqual(got, {
    odd: "https://traces.example/t/a%20b%2Fc%3Fd%23e%26f%25",
    script: null,
    none: null,
    noPlaceholder: null,
  });
});

test(
  "an operation id with ':' opens its history",
  async () => {
    const own = [];
    const tab = await openBoard("colon", own);
    try {
      const shown = await openHistory(expect.colon, tab);
      assert.match(shown.state, /^verified /, `${shown.text} | ${own.join("; ")}`);
      assert.deepEqual(own, []);
    } finally {
      await tab.close();
    }
  },
);

test("no page error and no console error", async () => {
  assert.deepEqual(problems, []);
});
