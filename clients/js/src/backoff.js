// Reconnect delays: exponential backoff with jitter.

/** Defaults, in milliseconds: 100 ms doubling up to 5 s, each delay cut by up to half at random. */
export const DEFAULT_BACKOFF = Object.freeze({ initial: 100, max: 5000, factor: 2, jitter: 0.5 });

/** Fill in and check backoff options; returns a frozen object. */
export function backoffOptions(options = {}) {
  const merged = { ...DEFAULT_BACKOFF, ...options };
  const { initial, max, factor, jitter } = merged;
  if (!(initial >= 0) || !(max >= initial) || !(factor >= 1) || !(jitter >= 0 && jitter <= 1)) {
    throw new RangeError("backoff needs 0 <= initial <= max, factor >= 1 and 0 <= jitter <= 1");
  }
  return Object.freeze(merged);
}

/**
 * The delay before reconnect attempt `attempt` (0 for the first), in milliseconds:
 * `cap = min(max, initial * factor ** attempt)`, then a uniformly random delay in
 * `[cap * (1 - jitter), cap]`, so that many clients dropped at once do not come back at once.
 * `random` returns a number in [0, 1) (Math.random by default; tests pass their own).
 */
export function backoffDelay(attempt, options = DEFAULT_BACKOFF, random = Math.random) {
  const { initial, max, factor, jitter } = options;
  const cap = Math.min(max, initial * factor ** Math.max(0, attempt));
  return cap * (1 - jitter * random());
}
