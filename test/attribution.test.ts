// The attribution's sentence (src/profile/interventions-summary.ts): it names only what the run weighed, and
// concludes from what it weighed.
import { describe, expect, test } from "bun:test";

import { attributionVerdict } from "../src/profile/interventions-summary.ts";

const launch = (change: number) => ({ mode: "graph", eager_ms: 1, mode_ms: 1 - change, change });
const bytes = (bytesRatio: number, timeRatio: number) => ({
  from: "f32" as const,
  to: "bf16" as const,
  bytes_ratio: bytesRatio,
  time_ratio: timeRatio,
});
const batch = (n: number, stepRatio: number) => ({
  batch: n,
  step_ratio: stepRatio,
  token_ratio: stepRatio / n,
  compute_bound_from: null,
});

describe("attributionVerdict", () => {
  test("nothing weighed: says what it would weigh", () => {
    expect(attributionVerdict(8, null, null, null)).toBe(
      "Attribution at context 8: nothing to weigh (it weighs storage types of different bytes at batch 1, a batch against batch 1, and eager against another launch mode).",
    );
  });

  test("the launch mode alone, small: no claim about batching, which was not run", () => {
    const v = attributionVerdict(1000, launch(-0.06), null, null);
    expect(v).toBe(
      "Attribution at context 1000: graph instead of eager cost 6% more: the launch mode did not move it much.",
    );
  });

  test("a batch alone that costs its sequences' steps: no claim about launches", () => {
    expect(attributionVerdict(64, null, null, batch(4, 3.5))).toMatch(/: batching did not halve the cost per token\.$/);
  });

  test("both, neither large: neither moved it", () => {
    expect(attributionVerdict(64, launch(0.02), null, batch(4, 3.5))).toMatch(
      /: neither launches nor batching moved it much\.$/,
    );
  });

  test("the bytes followed: the floor is weight traffic; a large launch saving leads", () => {
    expect(attributionVerdict(64, launch(0.01), bytes(2, 1.9), null)).toMatch(/: the floor is weight traffic\.$/);
    expect(attributionVerdict(64, launch(0.4), bytes(2, 1.9), null)).toMatch(
      /: launch overhead is a large part of the floor, and the rest follows the bytes\.$/,
    );
  });
});
