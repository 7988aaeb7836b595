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
      "Attribution at context 1000: graph instead of eager cost 6% more: launch overhead is not a large part of the floor.",
    );
    // where the modes' steps were paired with read passes, the mode's is taken at eager's read rate: said so
    expect(attributionVerdict(1000, launch(-0.06), null, null, true)).toBe(
      "Attribution at context 1000: graph instead of eager cost 6% more (its step at eager's memory read rate): launch overhead is not a large part of the floor.",
    );
  });

  test("a batch alone that is not cheap: what it did per token, against a step that reads its weights once", () => {
    expect(attributionVerdict(64, null, null, batch(4, 3.5))).toBe(
      "Attribution at context 64: batch 4 cost 3.50× a single step (0.88× per token): batching cut the cost per token " +
        "to 0.88×, short of the 0.25× of a step that reads its weights once for all 4 sequences.",
    );
    expect(attributionVerdict(64, null, null, batch(2, 1.95))).toMatch(
      /: batching did not lower the cost per token\.$/,
    );
  });

  test("both, neither large: each said for what it is", () => {
    expect(attributionVerdict(64, launch(0.02), null, batch(4, 2.48))).toMatch(
      /: launch overhead is not a large part of the floor, and batching cut the cost per token to 0\.62×, short of the 0\.25× .*\.$/,
    );
  });

  test("the bytes followed: the floor is weight traffic; a large launch saving leads", () => {
    expect(attributionVerdict(64, launch(0.01), bytes(2, 1.9), null)).toMatch(/: the floor is weight traffic\.$/);
    expect(attributionVerdict(64, launch(0.4), bytes(2, 1.9), null)).toMatch(
      /: launch overhead is a large part of the floor, and the rest follows the bytes\.$/,
    );
  });
});
