// Listeners and waiters: what HubClient offers to code that reacts to it.

export class Emitter {
  constructor() {
    this._listeners = new Map();
    this._waiters = new Set();
  }

  /**
   * Listen: `state` (state, event), `messages` (messages, event), `event` (event), `status`
   * (status, detail), `seq` ({seq, epoch}), `lag` (lag), `resync` ({reason, counts}),
   * `snapshot` ({cause, seq, counts}), `publish` (outcome), `conflict` (outcome), `error`
   * (hub.error value), `welcome` (value), `control` ({name, value}), `warning` (message).
   * Returns a function that removes the listener.
   */
  on(name, fn) {
    if (typeof fn !== "function") throw new TypeError("a listener must be a function");
    if (!this._listeners.has(name)) this._listeners.set(name, new Set());
    this._listeners.get(name).add(fn);
    return () => this.off(name, fn);
  }

  off(name, fn) {
    this._listeners.get(name)?.delete(fn);
  }

  _emit(name, ...args) {
    for (const fn of this._listeners.get(name) ?? []) {
      try {
        fn(...args);
      } catch (err) {
        console.error(`agui-hub: a '${name}' listener failed:`, err);
      }
    }
  }

  /** Resolves when `predicate(client)` holds (checked after every frame and status change). */
  waitFor(predicate, { timeout = 10_000 } = {}) {
    if (predicate(this)) return Promise.resolve(this);
    return new Promise((resolve, reject) => {
      const waiter = { predicate, resolve, reject, timer: null };
      if (timeout > 0 && timeout < Infinity) {
        waiter.timer = setTimeout(() => {
          this._waiters.delete(waiter);
          reject(new Error(`waitFor: timed out after ${timeout} ms (${this.describe?.() ?? ""})`));
        }, timeout);
      }
      this._waiters.add(waiter);
    });
  }

  _wake() {
    for (const waiter of [...this._waiters]) {
      let done;
      try {
        done = waiter.predicate(this);
      } catch (err) {
        this._waiters.delete(waiter);
        clearTimeout(waiter.timer);
        waiter.reject(err);
        continue;
      }
      if (done) {
        this._waiters.delete(waiter);
        clearTimeout(waiter.timer);
        waiter.resolve(this);
      }
    }
  }
}
