// A page on CopilotKit's React package (page.jsx, bundled here with esbuild) in Debian's headless
// Chromium, driven by playwright-core (never a downloaded browser), against two CopilotKit
// runtime processes (@copilotkit/runtime's Node listener, AguiHubRunner) on one hub. Each runtime
// serves the page from its own origin. Tab one (runtime A) sends; tab two (runtime B) opens
// mid-run and shows the same reply as it streams; tab one reloads mid-run and catches up; both
// end showing exactly the thread's messages as GET /v1/threads/{id} has them.
//
//   AGUI_HUB_BIN  the hub (default: the checkout's .venv/bin/agui-hub)
//   CHROMIUM      the browser (default /usr/bin/chromium)

import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { build } from "esbuild";
import { chromium } from "playwright-core";

import { replyText } from "../../clients/js/test-support/copilotkit-agent.mjs";
import { startRuntime } from "../../clients/js/test-support/copilotkit.mjs";
import { hubMissing, sleep, startHub, threadId } from "../../clients/js/test-support/hub.mjs";

const HERE = dirname(fileURLToPath(import.meta.url));
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const WORDS = 40; // the page's send button: 40 words, 75 ms apart (a word and its state delta): the
// run lasts 3 s, so that a second tab opens and the first reloads inside it on a loaded machine
const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

const missing =
  hubMissing() ?? (process.env.CI !== "true" && !existsSync(CHROMIUM) ? `no Chromium at ${CHROMIUM}` : null);

let work;
let hub;
let rtA;
let rtB;
let context;
const problems = [];

before(async () => {
  if (missing) return;
  work = mkdtempSync(join(tmpdir(), "agui-ck-page-"));
  const pageDir = join(work, "page");
  await build({
    entryPoints: [join(HERE, "page.jsx")],
    absWorkingDir: HERE,
    bundle: true,
    minify: true,
    format: "esm",
    jsx: "automatic",
    outdir: pageDir,
    define: { "process.env.NODE_ENV": '"production"' },
    // katex's fonts (CopilotKit's markdown): not needed here
    loader: { ".woff": "empty", ".woff2": "empty", ".ttf": "empty" },
    logLevel: "error",
  });
  writeFileSync(
    join(pageDir, "index.html"),
    '<!doctype html><html><head><meta charset="utf-8"><title>CopilotKit on agui-hub</title>' +
      '<link rel="stylesheet" href="page.css"></head><body><div id="root"></div>' +
      '<script type="module" src="page.js"></script></body></html>',
  );
  hub = await startHub();
  [rtA, rtB] = await Promise.all([startRuntime(hub.http, { pageDir }), startRuntime(hub.http, { pageDir })]);
  context = await chromium.launchPersistentContext(join(work, "profile"), {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
  });
});

after(async () => {
  await context?.close();
  await Promise.all([rtA?.stop(), rtB?.stop()]);
  await hub?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

/** A tab on `runtime`'s page for `thread`, its errors collected. */
async function open(runtime, thread) {
  const page = await context.newPage();
  page.on("pageerror", (err) => problems.push(`pageerror: ${err.message}`));
  await page.goto(`${runtime.url.replace(/\/api$/, "")}/?thread=${thread}`);
  await connected(page);
  return page;
}

/** Wait until the page's agent is ready and its connect on load was made. */
async function connected(page) {
  await page.waitForSelector('main[data-ready="true"]', { timeout: 15_000 });
  await until(page, "the connect on load", () => window.__status.connects >= 1);
}

async function until(page, what, fn, arg, timeout = 15_000) {
  const deadline = Date.now() + timeout;
  for (;;) {
    if (await page.evaluate(fn, arg)) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

/** The messages a tab shows: [id, role, text]. */
const shown = (page) =>
  page.$$eval('[data-testid="message"]', (items) => items.map((li) => [li.dataset.id, li.dataset.role, li.textContent]));

/** The words of the assistant's reply a tab shows (0 before it shows one). */
const wordsShown = (page) =>
  page.$$eval('[data-testid="message"][data-role="assistant"]', (items) =>
    items.length ? items.at(-1).textContent.split(" ").filter(Boolean).length : 0,
  );

test("two tabs show the same streamed reply; one reloads mid-run and catches up", { skip: missing ?? false }, async () => {
  const thread = threadId("ck-page");
  const one = await open(rtA, thread);
  await one.click('[data-testid="send"]');
  await until(one, "tab one streams the reply", () => document.querySelectorAll('[data-role="assistant"]').length === 1);
  assert.ok((await wordsShown(one)) < WORDS, "tab one shows the reply as it streams");

  // Tab two, on the other runtime, opens mid-run: the reply so far, then live.
  const two = await open(rtB, thread);
  const first = await wordsShown(two);
  assert.ok((await hub.thread(thread)).run != null, "the run was open when tab two connected");
  await until(two, "tab two follows the reply live", (n) => {
    const li = [...document.querySelectorAll('[data-role="assistant"]')].at(-1);
    return li && li.textContent.split(" ").length > n;
  }, first);

  // Tab one reloads mid-run: its connect catches up with the run so far, then follows it.
  const before = await wordsShown(one);
  assert.ok(before < WORDS, "tab one reloads before the end");
  await one.reload();
  await connected(one);
  await until(one, "tab one shows the reply again after its reload", () => document.querySelectorAll('[data-role="assistant"]').length === 1);
  const caughtUp = await wordsShown(one);
  assert.ok((await hub.thread(thread)).run != null || caughtUp === WORDS, "caught up while the run was open (or at its end)");

  // Both end with the whole reply, exactly the thread the hub holds.
  const whole = replyText(WORDS);
  for (const [name, tab] of [["one", one], ["two", two]]) {
    await until(tab, `tab ${name} has the whole reply`, (text) => [...document.querySelectorAll('[data-role="assistant"]')].at(-1)?.textContent === text, whole);
    await until(tab, `tab ${name}'s run is over`, () => document.querySelector("main").dataset.running === "false");
  }
  const view = await hub.thread(thread);
  assert.equal(view.run, null);
  const expected = view.messages.map((m) => [m.id, m.role, m.content ?? ""]);
  assert.equal(expected.at(-1)[2], whole);
  assert.deepEqual(await shown(one), expected, "tab one shows the hub's messages");
  assert.deepEqual(await shown(two), expected, "tab two shows the hub's messages");
  for (const tab of [one, two]) {
    assert.deepEqual(JSON.parse(await tab.textContent('[data-testid="state"]')), view.state, "and its state");
    assert.deepEqual(await tab.evaluate(() => window.__status.errors), []);
  }
  assert.deepEqual(problems, []);
});
