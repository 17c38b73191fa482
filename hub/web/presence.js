// "Who is here": the people on this thread, from the hub's presence (docs/protocol.md, "Who is
// here"). The tab joins with `?presence=NAME` (common.js), so its welcome lists everyone on the
// thread (`presence: {self, members}`); after that, one CUSTOM `hub.presence` event per change
// (`join`, `update`, `leave`) keeps the list. A reconnect's welcome brings the whole list again.
//
// The name is the tab's: a random "Guest NNN" the first time, kept in sessionStorage (so a reload
// keeps it, another tab picks its own), and editable here; a new name is sent as a `hub.presence`
// message, which everyone (this tab too) is told about as an `update`.

import { byTestId, el, presenceUrl } from "./common.js";

const STORAGE_KEY = "agui-hub-demo-name";
/** The hub's bound on a name (docs/protocol.md: at most 128 printable characters). */
export const MAX_NAME = 128;

/** A printable name of at most MAX_NAME characters, or null when nothing is left. */
function cleanName(text) {
  const name = String(text).replace(/[\u0000-\u001f\u007f-\u009f]/g, "").trim().slice(0, MAX_NAME);
  return name === "" ? null : name;
}

/** This tab's name: the one it picked before (sessionStorage), else a new "Guest NNN". */
export function tabName() {
  let stored = null;
  try {
    stored = cleanName(sessionStorage.getItem(STORAGE_KEY) ?? "");
  } catch {
    // storage refused (a privacy setting): the name lasts as long as the page
  }
  if (stored !== null) return stored;
  const name = `Guest ${100 + Math.floor(Math.random() * 900)}`;
  keepName(name);
  return name;
}

function keepName(name) {
  try {
    sessionStorage.setItem(STORAGE_KEY, name);
  } catch {
    // as above
  }
}

/**
 * Show who is on `client`'s thread in the page's "who is here" panel and let the person rename
 * themself. `name` is the name the client joined with. Test hook: every member's `<li>` is
 * `data-testid="member"` with `data-member-id` and `data-name`, this tab's has `data-self`.
 */
export function whoIsHere(client, name) {
  const list = byTestId("members");
  const form = byTestId("name-form");
  const input = byTestId("name-input");
  const note = byTestId("name-status");
  /** Member id -> `{id, sub, name, data}`, in the order they came. */
  const members = new Map();
  let self = null;
  let mine = name;
  input.value = mine;
  input.maxLength = MAX_NAME;

  const render = () => {
    const items = [...members.values()].map((m) => {
      const shown = m.name ?? "(no name)";
      const li = el(
        "li",
        { className: "member", testid: "member", dataset: { memberId: m.id, name: m.name ?? "" } },
        el("span", { className: "member-dot", "aria-hidden": "true" }),
        el("span", { className: "member-name", text: shown }),
      );
      if (m.id === self) {
        li.dataset.self = "true";
        li.append(el("span", { className: "member-you", text: "(you)" }));
      }
      return li;
    });
    if (items.length === 0) items.push(el("li", { className: "empty", text: "Nobody is shown yet." }));
    list.replaceChildren(...items);
    list.dataset.count = String(members.size);
  };

  const setAll = (value) => {
    members.clear();
    self = typeof value?.self === "string" ? value.self : null;
    for (const m of Array.isArray(value?.members) ? value.members : []) {
      if (m !== null && typeof m === "object" && typeof m.id === "string") members.set(m.id, m);
    }
    render();
  };

  client.on("welcome", (value) => setAll(value?.presence));
  client.on("control", ({ name: kind, value }) => {
    if (kind !== "hub.presence" || value === null || typeof value !== "object") return;
    if (value.kind === "members") {
      setAll(value);
      return;
    }
    const member = value.member;
    if (member === null || typeof member !== "object" || typeof member.id !== "string") return;
    if (value.kind === "leave") members.delete(member.id);
    else if (value.kind === "join" || value.kind === "update") members.set(member.id, member);
    else return;
    if (member.id === self && value.kind === "update" && member.name === mine) note.textContent = "Everyone sees it.";
    render();
  });
  client.on("error", (value) => {
    if (typeof value?.code === "string" && value.code.startsWith("presence_")) {
      note.textContent = `The hub refused the name (${value.code}).`;
    } else if (value?.code === "too_many_members") {
      note.textContent = "The document is full: you are on it, but not shown.";
    }
  });

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = cleanName(input.value);
    if (next === null) {
      input.value = mine;
      note.textContent = "A name needs at least one character.";
      return;
    }
    input.value = next;
    if (next === mine) return;
    mine = next;
    keepName(next);
    // The next connection shows the new name from the start; this one is told with a message.
    client.url = presenceUrl(client.thread, next);
    const socket = client.status === "open" ? client.socket : null;
    if (socket !== null && socket.readyState === 1) {
      socket.send(JSON.stringify({ type: "hub.presence", name: next }));
      note.textContent = "Renaming…";
    } else {
      note.textContent = "Saved: shown when the connection is back.";
    }
  });
  render();
}
