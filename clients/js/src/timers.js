// Named one-shot timers, at most one of each name running: a client's retry, open, idle, ack and
// close timers. Housekeeping timers never hold a Node process open; `keepAlive` ones do.

export class Timers {
  constructor() {
    this._timers = {};
  }

  /** Run `fn` after `ms` under `name`, replacing any timer of that name (none for 0 or Infinity). */
  set(name, ms, fn, { keepAlive = false } = {}) {
    this.clear(name);
    if (!(ms > 0) || ms === Infinity) return;
    const timer = setTimeout(() => {
      this._timers[name] = null;
      fn();
    }, ms);
    if (!keepAlive) timer.unref?.(); // Node: housekeeping timers never hold the process open
    this._timers[name] = timer;
  }

  /** Whether a timer of this name is waiting. */
  has(name) {
    return (this._timers[name] ?? null) !== null;
  }

  clear(name) {
    clearTimeout(this._timers[name]);
    this._timers[name] = null;
  }

  clearAll() {
    for (const name of Object.keys(this._timers)) this.clear(name);
  }
}
