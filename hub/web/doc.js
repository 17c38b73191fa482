// The collaborative document: the agent writes sections, people edit titles and text.
//
// An edit is a hub.publish of a JSON Patch whose `test` operations say what it was made
// against: the value the field held when the person started typing, and (for a section) that
// the section is still the one at that index. The hub applies it only if that still holds, so
// of two people editing the same field from the same value exactly one wins; the other gets a
// `conflict`, a fresh snapshot, and a notice here saying what won. Nothing is merged silently.
// People can also ask the agent (ask.js): a message box whose message becomes a run.

import { askBox } from "./ask.js";
import { asText, byTestId, el, keepThreadInLinks, pageThread, startPage, valueAt } from "./common.js";
import { tabName, whoIsHere } from "./presence.js";
import { docUrl, threadList } from "./threads.js";

const MAX_NOTICES = 6;
const SAVED_FLASH_MS = 1500;

const titleInput = byTestId("doc-title");
const sectionList = byTestId("sections");
const noticeList = byTestId("conflicts");

/** Every editable field on the page, and the section elements by section id. */
const fields = new Set();
const sectionNodes = new Map();
/** Refused edits, newest first: `{kind, label, mine, field, reason}`. */
const notices = [];
let client = null;

function sameValue(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** The sections of a state, if it has any of the expected shape (state is untrusted). */
function sectionsOf(state) {
  const list = state !== null && typeof state === "object" ? state.sections : null;
  return Array.isArray(list) ? list : [];
}

function indexOfSection(state, id) {
  return sectionsOf(state).findIndex((s) => s !== null && typeof s === "object" && s.id === id);
}

/**
 * One editable value of the state. `locate(state)` says where it is now: `{path, guard, extra}`
 * (`guard`: test operations that pin the place; `extra`: more operations for the edit), or null
 * when it is gone.
 */
class Field {
  constructor(input, { key, label, locate, onRemote }) {
    this.input = input;
    this.key = key;
    this.label = label;
    this.locate = locate;
    this.onRemote = onRemote ?? (() => {});
    /** Typing since the last save: the hub's updates are not written over it. */
    this.dirty = false;
    /** The value the person started from (what the edit is tested against). */
    this.base = undefined;
    this.flashTimer = null;
    input.classList.add("field");
    input.dataset.field = key;
    input.addEventListener("input", () => {
      this.dirty = true;
      this.markRemote();
    });
    input.addEventListener("change", () => this.commit());
    input.addEventListener("keydown", (e) => {
      const isInput = input.tagName === "INPUT";
      if (e.key === "Enter" && (isInput || e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        this.commit();
      } else if (e.key === "Escape" && this.dirty) {
        this.dirty = false; // give up the edit: show the document again
        this.render();
      }
    });
    fields.add(this);
  }

  valueIn(state) {
    const place = this.locate(state);
    return place === null ? undefined : valueAt(state, place.path);
  }

  render() {
    if (client === null) return;
    if (!this.dirty) {
      const shown = this.valueIn(client.optimisticState);
      const text = asText(shown);
      if (this.input.value !== text) this.input.value = text;
      this.base = shown;
    }
    this.markRemote();
  }

  /** Say so while someone else changes what this person is editing. */
  markRemote() {
    if (client === null) return;
    const now = this.valueIn(client.optimisticState);
    const changed = this.dirty && !sameValue(now, this.base);
    if (changed) this.input.dataset.remote = "changed";
    else delete this.input.dataset.remote;
    this.onRemote(changed, now);
  }

  setEdit(status) {
    clearTimeout(this.flashTimer);
    if (status === null) delete this.input.dataset.edit;
    else this.input.dataset.edit = status;
    if (status === "saved") this.flashTimer = setTimeout(() => this.setEdit(null), SAVED_FLASH_MS);
  }

  async commit() {
    if (!this.dirty || client === null) return;
    this.dirty = false;
    const mine = this.input.value;
    const base = this.base;
    if (mine === asText(base)) {
      this.render();
      return;
    }
    const place = this.locate(client.optimisticState);
    if (place === null) {
      this.input.dataset.lastOutcome = "gone";
      addNotice({ kind: "not-saved", label: this.label, mine, field: this, reason: "it was removed meanwhile" });
      this.render();
      return;
    }
    const test = { ...place.guard };
    if (base !== undefined) test[place.path] = base;
    const ops = [{ op: base === undefined ? "add" : "replace", path: place.path, value: mine }, ...(place.extra ?? [])];
    this.setEdit("pending");
    this.input.dataset.lastOutcome = "pending";
    const outcome = client.publish(ops, { test });
    renderAll();
    const result = await outcome;
    this.input.dataset.lastOutcome = result.status;
    if (result.ok) {
      this.setEdit("saved");
    } else {
      this.setEdit(null);
      if (result.status === "conflict") {
        addNotice({ kind: "conflict", label: this.label, mine, field: this });
      } else {
        const reason =
          result.status === "rejected"
            ? `the hub refused it (${result.code})`
            : `no answer from the hub (${result.reason ?? result.status}), so it may or may not be in; check the field`;
        addNotice({ kind: "not-saved", label: this.label, mine, field: this, reason });
      }
    }
    renderAll();
  }

  forget() {
    clearTimeout(this.flashTimer);
    fields.delete(this);
  }
}

// -- refused edits ------------------------------------------------------------------------------

function addNotice(notice) {
  notices.unshift({ ...notice, at: new Date() });
  notices.length = Math.min(notices.length, MAX_NOTICES);
  renderNotices();
}

/** The notice elements, kept across renders (the text is updated; a dismiss click must land). */
const noticeItems = new Map();

function noticeText(n) {
  const now = client === null ? undefined : n.field.valueIn(client.state);
  const nowText = now === undefined ? "it is no longer in the document" : `it now reads “${asText(now)}”`;
  return n.kind === "conflict"
    ? `Conflict on ${n.label}: your edit “${n.mine}” was not applied, someone changed it first; ${nowText}.`
    : `Not saved: ${n.label} (“${n.mine}”): ${n.reason}.`;
}

function noticeItem(n) {
  const text = el("span", { className: "notice-text" });
  const dismiss = el("button", { type: "button", "aria-label": "Dismiss", title: "Dismiss", text: "×" });
  const li = el(
    "li",
    {
      className: `notice ${n.kind}`,
      testid: n.kind === "conflict" ? "conflict-notice" : "save-notice",
      dataset: { field: n.field.key, time: n.at.toLocaleTimeString() },
    },
    text,
    dismiss,
  );
  dismiss.addEventListener("click", () => {
    notices.splice(notices.indexOf(n), 1);
    renderNotices();
  });
  return { li, text };
}

function renderNotices() {
  const items = notices.map((n) => {
    let entry = noticeItems.get(n);
    if (entry === undefined) noticeItems.set(n, (entry = noticeItem(n)));
    const text = noticeText(n);
    if (entry.text.textContent !== text) entry.text.textContent = text;
    return entry.li;
  });
  for (const n of noticeItems.keys()) if (!notices.includes(n)) noticeItems.delete(n);
  const shown = noticeList.children;
  if (items.length !== shown.length || items.some((li, i) => shown[i] !== li)) noticeList.replaceChildren(...items);
}

// -- sections -----------------------------------------------------------------------------------

function sectionNode(id) {
  const title = el("input", {
    className: "section-title",
    testid: "section-title",
    "aria-label": "Section title",
    autocomplete: "off",
  });
  const text = el("textarea", {
    className: "section-text",
    testid: "section-text",
    "aria-label": "Section text",
    rows: 3,
  });
  const by = el("span", { testid: "section-by" });
  const remote = el("span", { className: "remote-note", testid: "section-remote" });
  const li = el(
    "li",
    { className: "section", testid: "section", dataset: { sectionId: id } },
    title,
    text,
    el("div", { className: "section-meta" }, el("span", { text: id }), by, remote),
  );
  const place = (key) => (state) => {
    const i = indexOfSection(state, id);
    if (i < 0) return null;
    return {
      path: `/sections/${i}/${key}`,
      guard: { [`/sections/${i}/id`]: id },
      extra: [{ op: "add", path: `/sections/${i}/by`, value: "a person" }],
    };
  };
  const notes = new Map();
  const onRemote = (which) => (changed) => {
    notes.set(which, changed);
    const any = [...notes].filter(([, on]) => on).map(([name]) => name);
    remote.textContent = any.length ? `the ${any.join(" and ")} changed while you edit: saving will conflict` : "";
  };
  const node = {
    li,
    by,
    title: new Field(title, {
      key: `${id}/title`,
      label: `the title of section ${id}`,
      locate: place("title"),
      onRemote: onRemote("title"),
    }),
    text: new Field(text, {
      key: `${id}/text`,
      label: `the text of section ${id}`,
      locate: place("text"),
      onRemote: onRemote("text"),
    }),
  };
  sectionNodes.set(id, node);
  return node;
}

function renderSections(state) {
  const present = new Set();
  const sections = sectionsOf(state).filter((s) => {
    if (s === null || typeof s !== "object" || typeof s.id !== "string" || present.has(s.id)) return false;
    present.add(s.id);
    return true;
  });
  // Sections gone from the state: dropped, unless someone is typing in one (kept, marked, until
  // they save, when they are told it is gone).
  for (const [id, node] of sectionNodes) {
    if (present.has(id)) continue;
    if (node.title.dirty || node.text.dirty) {
      node.li.classList.add("gone");
      continue;
    }
    node.li.remove();
    node.title.forget();
    node.text.forget();
    sectionNodes.delete(id);
  }
  // In state order, moving an element only when it is out of place (moving one blurs it).
  let cursor = sectionList.firstChild;
  for (const section of sections) {
    const node = sectionNodes.get(section.id) ?? sectionNode(section.id);
    node.li.classList.remove("gone");
    if (node.li === cursor) cursor = cursor.nextSibling;
    else sectionList.insertBefore(node.li, cursor);
    node.by.textContent = `by ${asText(section.by ?? "unknown")}`;
  }
  if (sections.length === 0 && sectionNodes.size === 0) {
    if (!sectionList.querySelector(".empty")) {
      sectionList.append(el("li", { className: "empty", text: "No sections yet: the agent is about to write some." }));
    }
  } else {
    sectionList.querySelector(".empty")?.remove();
  }
}

// -- the page -----------------------------------------------------------------------------------

const titleField = new Field(titleInput, {
  key: "title",
  label: "the document title",
  locate: () => ({ path: "/title", guard: {} }),
});

function renderAll() {
  if (client === null) return;
  renderSections(client.optimisticState);
  for (const field of fields) field.render();
  renderNotices();
}

// -- the thread deleted ------------------------------------------------------------------------

/** How long the page says its thread was deleted before it opens another (ms). */
const GONE_FOR_MS = 2_000;
const goneBanner = byTestId("thread-gone");
let gone = false;

/**
 * The open thread was deleted (here, or anywhere: the hub's `thread_deleted`, then close 4004):
 * stop following it, say so, and open another thread (the most recently changed one, else the
 * demo's own).
 */
async function threadGone(by) {
  if (gone) return;
  gone = true;
  client?.close(); // no reconnect: that would follow a new, empty thread of the same id
  for (const input of document.querySelectorAll("main input, main textarea, aside input, aside button")) {
    input.disabled = true;
  }
  document.body.dataset.threadGone = "true";
  const next = (await threads.others())[0] ?? (thread === "demo" ? null : "demo");
  const where = next === null ? "This page will load it again" : `Opening “${next}” in a moment`;
  goneBanner.textContent = `This document (“${thread}”) was deleted ${by}. ${where}…`;
  goneBanner.dataset.next = next ?? thread;
  goneBanner.hidden = false;
  setTimeout(() => location.assign(docUrl(next ?? thread)), GONE_FOR_MS);
}

keepThreadInLinks();
const thread = pageThread("demo");
const threads = threadList({ current: thread, onDeleted: () => threadGone("from this tab") });
const name = tabName();
let renderTalk = () => {};
client = startPage({
  thread,
  presence: name,
  render(c) {
    if (!gone) titleInput.disabled = false;
    renderAll();
    renderTalk(c);
  },
});
if (client !== null) {
  renderTalk = askBox(client);
  whoIsHere(client, name);
  client.on("publish", () => renderAll());
  client.on("error", (value) => {
    if (value?.code === "thread_deleted") threadGone(threads.deleting() === thread ? "from this tab" : "elsewhere");
  });
}
