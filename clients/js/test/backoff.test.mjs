// Reconnect delays grow exponentially to a cap, and jitter spreads them within known bounds.

import assert from "node:assert/strict";
import { test } from "node:test";

import { backoffDelay, backoffOptions, DEFAULT_BACKOFF } from "../src/agui-hub.js";

test("every delay lies in [cap * (1 - jitter), cap], the cap doubling up to max", () => {
  const options = backoffOptions({ initial: 100, max: 5_000, factor: 2, jitter: 0.5 });
  for (let attempt = 0; attempt < 30; attempt++) {
    const cap = Math.min(5_000, 100 * 2 ** attempt);
    assert.equal(
      backoffDelay(attempt, options, () => 0),
      cap,
      "no jitter drawn: the cap",
    );
    assert.ok(
      Math.abs(backoffDelay(attempt, options, () => 1 - 1e-12) - cap / 2) < 1e-6,
      "most jitter: half",
    );
    for (let i = 0; i < 50; i++) {
      const delay = backoffDelay(attempt, options);
      assert.ok(
        delay >= cap / 2 && delay <= cap,
        `attempt ${attempt}: ${delay} outside [${cap / 2}, ${cap}]`,
      );
    }
  }
});

test("jitter actually spreads the delays", () => {
  const delays = new Set(Array.from({ length: 100 }, () => Math.round(backoffDelay(3, DEFAULT_BACKOFF))));
  assert.ok(delays.size > 20, `only ${delays.size} distinct delays out of 100`);
});

test("no jitter means exact delays; nonsense options are refused", () => {
  const exact = backoffOptions({ jitter: 0, initial: 10, max: 50 });
  assert.deepEqual(
    [0, 1, 2, 3, 4].map((a) => backoffDelay(a, exact)),
    [10, 20, 40, 50, 50],
  );
  for (const bad of [{ initial: -1 }, { max: 1, initial: 2 }, { factor: 0.5 }, { jitter: 2 }]) {
    assert.throws(() => backoffOptions(bad), RangeError, JSON.stringify(bad));
  }
});
