// Where a thread lives: the consumer WebSocket URL for a hub address and a thread id.

/** Thread ids the hub serves (README: 1 to 128 of A-Z a-z 0-9 . _ : -, letter or digit first). */
export const THREAD_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

/**
 * The consumer WebSocket URL of a thread. `url` is the hub's address (`ws://host:port`,
 * `http(s)://...` also accepted, with any path prefix a proxy adds); without it, in a browser,
 * the page's own origin. A `url` that already names the thread (`.../v1/threads/ID`) is taken
 * as it is when `thread` is not given.
 */
export function threadUrl(url, thread) {
  const base = url ?? globalThis.location?.origin;
  if (!base) throw new TypeError("HubClient needs a url (ws://host:port) outside a browser page");
  const u = new URL(String(base), globalThis.location?.href);
  if (u.protocol === "http:") u.protocol = "ws:";
  else if (u.protocol === "https:") u.protocol = "wss:";
  if (u.protocol !== "ws:" && u.protocol !== "wss:") {
    throw new TypeError(`the hub url must be ws:, wss:, http: or https:, not ${u.protocol}`);
  }
  if (thread == null) {
    const match = /\/v1\/threads\/([^/]+)$/.exec(u.pathname);
    if (!match || !THREAD_ID.test(match[1])) throw new TypeError("HubClient needs a thread id");
    return { url: u, thread: match[1] };
  }
  if (!THREAD_ID.test(thread)) {
    throw new TypeError(`not a thread id: ${JSON.stringify(thread)} (1-128 of A-Z a-z 0-9 . _ : -)`);
  }
  u.pathname = `${u.pathname.replace(/\/+$/, "")}/v1/threads/${thread}`;
  return { url: u, thread };
}
