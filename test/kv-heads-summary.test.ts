// The GQA intervention's arithmetic: where a measured step reaches twice its weights' time.
import { describe, expect, test } from "bun:test";

import { atOneReadRate, buildKvHeads, formulaCrossover, measuredCrossover } from "../src/profile/kv-heads-summary.ts";
import { ALL_PRESETS, kvColumns } from "../src/model/architectures.ts";
import { DEFAULT_STEP_FORM } from "../src/plan.ts";
import { cachedStepWork, sumWork } from "../src/profile/work-model.ts";
import type { InterventionPoint } from "../src/profile/types.ts";

const line = (weightsMs: number, msPerToken: number, contexts: number[]) =>
  contexts.map((c) => [c, weightsMs + msPerToken * c] as const);

describe("measuredCrossover", () => {
  test("a step linear in context crosses where its K/V time equals its time at context 0", () => {
    expect(measuredCrossover(line(10, 0.01, [256, 2048, 8192]))).toBeCloseTo(1000, 9);
    expect(measuredCrossover(line(4, 0.001, [256, 2048, 8192]))).toBeCloseTo(4000, 9);
  });

  test("the crossing is interpolated between the two contexts around it, after a bend", () => {
    // 10 ms at context 0 (from the first two points), 12 ms at 1000, then 30 ms at 3000: 20 ms at 1000 + 2000 × 8/18
    const steps = [
      [500, 11],
      [1000, 12],
      [3000, 30],
    ] as const;
    expect(measuredCrossover(steps)).toBeCloseTo(1000 + (2000 * 8) / 18, 9);
  });

  test("none where the run stops short of it, or with fewer than two contexts", () => {
    expect(measuredCrossover(line(10, 0.001, [256, 2048, 8192]))).toBeNull();
    expect(measuredCrossover([[8192, 20]])).toBeNull();
  });

  test("none where the two shortest contexts extrapolate to no positive time at context 0 (noise, not a crossing)", () => {
    // −10 ms at context 0 from these two; 0 ms from the next: a crossing "at 0 tokens" would be the noise's
    expect(
      measuredCrossover([
        [100, 10],
        [200, 30],
        [400, 70],
      ]),
    ).toBeNull();
    expect(
      measuredCrossover([
        [8, 0.1],
        [16, 0.3],
      ]),
    ).toBeNull();
  });

  test("none where the shortest context is already past it: only the extrapolation would place it there", () => {
    // 0.1 ms at context 0 by the line through these two, twice that at 215 tokens, before the 4096 measured
    expect(
      measuredCrossover([
        [4096, 2],
        [8192, 3.9],
      ]),
    ).toBeNull();
    // exactly at the shortest context: measured there
    expect(
      measuredCrossover([
        [100, 2],
        [200, 3],
        [400, 5],
      ]),
    ).toBe(100);
    // at the shortest context exactly short of it, the crossing is between the first two measured
    expect(measuredCrossover(line(10, 0.01, [999, 2000]))).toBeCloseTo(1000, 9);
  });
});

test("the crossover by the bytes is the model's, whatever context the point was taken at", () => {
  const cfg = ALL_PRESETS["smollm2-135m"]!;
  for (const batch of [1, 4]) {
    const form = { ...DEFAULT_STEP_FORM, batch };
    const at = (context: number) => formulaCrossover({ context, work: sumWork(cachedStepWork(cfg, context, form)) });
    expect(at(100) / at(8000)).toBeCloseTo(1, 12);
    // the weights' bytes over the K/V bytes of one position of every sequence
    const w = sumWork(cachedStepWork(cfg, 100, form));
    const perPosition = 2 * cfg.n_layer * batch * kvColumns(cfg) * 4;
    expect(at(100)).toBeCloseTo(w.weight_bytes / perPosition, 6);
  }
});

describe("atOneReadRate", () => {
  /** a point of one step time, its steps each `ms` after a pass reading `read` (null: unpaired), moving 600 MB */
  const point = (context: number, ms: number, read: number | null) =>
    ({
      context,
      step_ms: { median: ms },
      work: { bytes: 600e6 },
      read_bytes_per_s: read,
      over_floor: ms / ((600e6 / (read ?? 50e9)) * 1e3),
    }) as unknown as InterventionPoint;

  test("each time taken at the read rate beside the shortest context: a memory that slowed does not fake a crossing", () => {
    // 10 ms of weights + 0.001 ms per token at 60 GB/s; the memory at 40 GB/s beside context 8192 made that step 1.5× slower
    const series = [point(256, 10.256, 60e9), point(2048, 12.048, 60e9), point(8192, 18.192 * 1.5, 40e9)];
    const scaled = atOneReadRate(series);
    expect(scaled.map(([c]) => c)).toEqual([256, 2048, 8192]);
    expect(scaled[2]![1]).toBeCloseTo(18.192, 9);
    expect(measuredCrossover(series.map((p) => [p.context, p.step_ms.median]))).not.toBeNull();
    expect(measuredCrossover(scaled)).toBeNull();
  });

  test("the times as measured where any point's rate was not tracked", () => {
    const series = [point(256, 10, 60e9), point(2048, 12, null)];
    expect(atOneReadRate(series)).toEqual([
      [256, 10],
      [2048, 12],
    ]);
  });
});

describe("buildKvHeads savings", () => {
  /** a variant's point at context 8192: its steps each `ms` after a pass reading `read` (null: unpaired) */
  const variant = (kvHeads: number, bytes: number, ms: number, read: number | null) =>
    ({
      dtype: "f32",
      kv_dtype: "f32",
      batch: 1,
      kv_heads: kvHeads,
      context: 8192,
      step_ms: { median: ms },
      work: { bytes, weight_bytes: 500e6, kv_bytes: bytes - 500e6 },
      read_bytes_per_s: read,
      over_floor: ms / ((bytes / (read ?? 50e9)) * 1e3),
    }) as unknown as InterventionPoint;

  test("variants timed at different read rates are compared at the reference's: a slower memory does not eat the saving", () => {
    // 1 GB at 60 GB/s against 0.6 GB at 40 GB/s, each at 1.1× its floor: 40% of the bytes and of the time saved at one rate
    const k = buildKvHeads(
      [variant(8, 1e9, (1e9 / 60e9) * 1.1e3, 60e9), variant(2, 0.6e9, (0.6e9 / 40e9) * 1.1e3, 40e9)],
      false,
      131_071,
    );
    const saving = k!.savings[0]!;
    expect(saving.formula_saved).toBeCloseTo(0.4, 9);
    expect(saving.saved).toBeCloseTo(0.4, 9);
    expect(saving.reference_ms).toBeCloseTo((1e9 / 60e9) * 1.1e3, 9);
    expect(saving.step_ms).toBeCloseTo((0.6e9 / 60e9) * 1.1e3, 9);
  });

  test("the steps as measured where a point's rate was not tracked", () => {
    const k = buildKvHeads([variant(8, 1e9, 20, 60e9), variant(2, 0.6e9, 15, null)], true, 131_071);
    expect(k!.savings[0]!.saved).toBeCloseTo(0.25, 9);
  });

  test("a crossover by the bytes past the model's longest context is said to be past it, not merely unmeasured", () => {
    // 8 heads: 500 MB of K/V at 8192 against 500 MB of weights, 8,194 tokens; 2 heads: 100 MB, 40,970 tokens
    const points = [variant(8, 1e9, 20, null), variant(2, 0.6e9, 15, null)];
    const verdict = (largest: number) => buildKvHeads(points, true, largest)!.verdict;
    expect(verdict(131_071)).toMatch(/8 K\/V heads at 8\.2k tokens by the bytes \(not measured in the run\)/);
    expect(verdict(131_071)).toMatch(/2 K\/V heads at 41\.0k tokens by the bytes \(not measured in the run\)/);
    expect(verdict(32_767)).toMatch(/8 K\/V heads at 8\.2k tokens by the bytes \(not measured in the run\)/);
    expect(verdict(32_767)).toMatch(
      /2 K\/V heads at 41\.0k tokens by the bytes \(past the model's 32,767-token context\)/,
    );
  });
});
