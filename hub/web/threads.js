// The tenant's threads, beside the document: `GET /v1/threads` (most recently changed first),
// each openable (this page on `?thread=ID`), renameable (`PATCH /v1/threads/{id}` `name`) and
// deletable (`DELETE /v1/threads/{id}`, after a confirm). See docs/http.md, "Listing and editing
// threads".
//
// The list is fetched when the page loads, after each action taken here, every POLL_MS while
// the page is visible, and when it becomes visible again: other tabs and agents create, rename
// and delete threads without telling this one (the hub has no event for the list itself).

import { asText, byTestId, el, hubFetch } from "./common.js";

/** How often the list is fetched again while the page is visible (ms). */
export const POLL_MS = 5_000;
/** Threads listed (the hub's `limit`: 1 to 200). */
const LIMIT = 50;
/** The hub's bound on a name (docs/http.md: 1 to 256 characters). */
const MAX_NAME = 256;

/** The page URL of `id` (the token, in the fragment, goes along). */
export function docUrl(id) {
  const url = new URL("doc.html", location.href);
  url.search = "";
  url.searchParams.set("thread", id);
  url.hash = location.hash;
  return url.pathname + url.search + url.hash;
}

/** What the hub said when it refused, in a few words. */
async function refusal(response) {
  try {
    const body = await response.json();
    return asText(body?.error?.code ?? body?.code ?? body?.detail ?? response.status);
  } catch {
    return String(response.status);
  }
}

function ago(iso) {
  const then = Date.parse(iso);
  if (!Number.isFinite(then)) return "";
  const s = Math.max(0, Math.round((Date.now() - then) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86_400) return `${Math.round(s / 3600)} h ago`;
  return new Date(then).toLocaleDateString();
}

/**
 * The thread list of the page whose open thread is `current`. `onDeleted(id)` is called when
 * this page deleted the open thread. Returns `{refresh, others, deleting}`: `refresh()` fetches
 * the list again; `others()` resolves to the listed ids other than `current`, freshly fetched;
 * `deleting()` is the id this page is deleting, until the hub answered (else null).
 *
 * Test hook: the list is `data-testid="threads"` with `data-loaded` (fetches done),
 * `data-ids` (the ids listed, in order) and `data-busy` while a rename or a delete is in
 * flight (the page takes no other meanwhile); each thread's `<li>` is `data-testid="thread-item"` with
 * `data-id`, holding `thread-open` (a link), `thread-rename` and `thread-delete` buttons.
 * `threads-summary` says what the latest fetch listed; `threads-status` the outcome of the latest
 * rename or delete taken here, which no fetch overwrites.
 */
export function threadList({ current, onDeleted = () => {} }) {
  const list = byTestId("threads");
  const summary = byTestId("threads-summary"); // what the latest fetch listed (or why it failed)
  const note = byTestId("threads-status"); // the outcome of the latest rename or delete: kept
  // until the next one, as the list is fetched again right after each and every POLL_MS
  let loaded = 0;
  let asked = 0; // the latest fetch asked for: an older answer arriving late is dropped
  let editing = null; // the id whose name is being edited: the list is not redrawn meanwhile
  let busy = false; // a rename or a delete in flight: another waits (shown as data-busy)
  const setBusy = (value) => {
    busy = value;
    if (value) list.dataset.busy = "1";
    else delete list.dataset.busy;
  };
  let deleting = null; // the id being deleted from this page, until the hub answered

  const say = (text) => {
    note.textContent = text;
  };

  async function fetchList() {
    const response = await hubFetch(`/v1/threads?limit=${LIMIT}`);
    if (!response.ok) throw new Error(`the hub answered ${await refusal(response)}`);
    const body = await response.json();
    return Array.isArray(body?.threads)
      ? body.threads.filter((t) => t !== null && typeof t === "object" && typeof t.id === "string")
      : [];
  }

  async function refresh() {
    const mine = ++asked;
    let threads;
    try {
      threads = await fetchList();
    } catch (err) {
      if (mine === asked) summary.textContent = `Could not list the threads: ${err?.message ?? err}.`;
      return;
    }
    if (mine !== asked) return;
    loaded++;
    list.dataset.loaded = String(loaded);
    if (editing === null) render(threads);
  }

  function render(threads) {
    const items = threads.map(item);
    if (!threads.some((t) => t.id === current)) {
      // The open thread is not listed until someone writes to it: say so, at the top.
      items.unshift(
        el(
          "li",
          { className: "thread current", testid: "thread-unwritten", "aria-current": "page" },
          el("span", { className: "thread-name", text: current }),
          el("span", { className: "thread-meta", text: "open here; listed once something is written" }),
        ),
      );
    }
    if (items.length === 0) items.push(el("li", { className: "empty", text: "No threads yet." }));
    list.replaceChildren(...items);
    list.dataset.ids = threads.map((t) => t.id).join(",");
    summary.textContent = `${threads.length} thread(s), most recently changed first.`;
  }

  function item(thread) {
    const name = typeof thread.name === "string" && thread.name !== "" ? thread.name : null;
    const isCurrent = thread.id === current;
    const open = el("a", {
      className: "thread-open",
      testid: "thread-open",
      href: docUrl(thread.id),
      text: name ?? thread.id,
      "aria-current": isCurrent ? "page" : undefined,
    });
    const meta = [name === null ? null : thread.id, `seq ${asText(thread.seq)}`, ago(thread.updated)];
    if (thread.run) meta.push("run open");
    if (thread.archived) meta.push("archived");
    const rename = el("button", { type: "button", testid: "thread-rename", title: "Rename", text: "Rename" });
    const remove = el("button", { type: "button", testid: "thread-delete", title: "Delete", text: "Delete" });
    const li = el(
      "li",
      { className: isCurrent ? "thread current" : "thread", testid: "thread-item", dataset: { id: thread.id } },
      open,
      el("span", { className: "thread-meta", text: meta.filter(Boolean).join(" · ") }),
      el("span", { className: "thread-actions" }, rename, remove),
    );
    li.dataset.name = name ?? "";
    rename.addEventListener("click", () => startRename(li, thread, name));
    remove.addEventListener("click", () => confirmDelete(thread, name));
    return li;
  }

  function startRename(li, thread, name) {
    if (busy) return;
    editing = thread.id;
    const input = el("input", {
      className: "thread-name-input",
      testid: "thread-name-input",
      "aria-label": `New name of ${thread.id}`,
      maxlength: MAX_NAME,
      autocomplete: "off",
      placeholder: "a name (empty: none)",
    });
    input.value = name ?? "";
    const form = el("form", { className: "thread-rename-form" }, input);
    li.querySelector(".thread-open").replaceWith(form);
    let done = false;
    const finish = async (save) => {
      if (done) return;
      done = true;
      const text = input.value.trim();
      if (save && text !== (name ?? "")) await rename(thread.id, text === "" ? null : text);
      editing = null;
      await refresh();
    };
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      finish(true);
    });
    input.addEventListener("keydown", (e) => {
      if (e.key === "Escape") finish(false);
    });
    input.addEventListener("blur", () => finish(true));
    input.focus();
    input.select();
  }

  async function rename(id, name) {
    setBusy(true);
    say(`Renaming ${id}…`);
    try {
      const response = await hubFetch(`/v1/threads/${encodeURIComponent(id)}`, {
        method: "PATCH",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ name }),
      });
      say(response.ok ? `Renamed ${id}.` : `Not renamed: the hub answered ${await refusal(response)}.`);
    } catch (err) {
      say(`Not renamed: ${err?.message ?? err}.`);
    } finally {
      setBusy(false);
    }
  }

  async function confirmDelete(thread, name) {
    if (busy) return;
    const what = name === null ? `“${thread.id}”` : `“${name}” (${thread.id})`;
    const here = thread.id === current ? " It is the document open here." : "";
    const question = `Delete ${what} for everyone? Its state, messages and log are gone for good.${here}`;
    if (!window.confirm(question)) {
      say("Not deleted.");
      return;
    }
    setBusy(true);
    deleting = thread.id;
    say(`Deleting ${thread.id}…`);
    let gone = false;
    try {
      const response = await hubFetch(`/v1/threads/${encodeURIComponent(thread.id)}`, { method: "DELETE" });
      // 404: someone deleted it first; it is gone either way.
      gone = response.status === 204 || response.status === 404;
      say(gone ? `Deleted ${thread.id}.` : `Not deleted: the hub answered ${await refusal(response)}.`);
    } catch (err) {
      say(`Not deleted: ${err?.message ?? err}.`);
    } finally {
      setBusy(false);
      deleting = null;
    }
    if (gone && thread.id === current) onDeleted(thread.id);
    await refresh();
  }

  async function others() {
    try {
      return (await fetchList()).map((t) => t.id).filter((id) => id !== current);
    } catch {
      return [];
    }
  }

  setInterval(() => {
    if (document.visibilityState === "visible") refresh();
  }, POLL_MS);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") refresh();
  });
  refresh();
  return { refresh, others, deleting: () => deleting };
}
