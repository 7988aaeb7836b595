import { describe, expect, test } from "bun:test";
import { summarize } from "../src/stats.ts";

describe("summarize", () => {
  test("known values of 1..10 (in any order)", () => {
    const s = summarize([7, 3, 10, 1, 5, 2, 9, 4, 8, 6]);
    expect(s.n).toBe(10);
    expect(s.median).toBe(5.5);
    expect(s.mean).toBe(5.5);
    // linear interpolation: index (n - 1) p = 0.9 → 1 + 0.9; 8.1 → 9 + 0.1
    expect(s.p10).toBeCloseTo(1.9, 12);
    expect(s.p90).toBeCloseTo(9.1, 12);
    expect(s.min).toBe(1);
    expect(s.max).toBe(10);
    expect(s.stddev).toBeCloseTo(Math.sqrt(82.5 / 9), 12); // sample standard deviation
    expect(s.spread).toBeCloseTo((9.1 - 1.9) / 5.5, 12);
  });

  test("one sample has no spread", () => {
    expect(summarize([4.2])).toEqual({
      n: 1,
      median: 4.2,
      mean: 4.2,
      p10: 4.2,
      p90: 4.2,
      min: 4.2,
      max: 4.2,
      stddev: 0,
      spread: 0,
    });
  });

  test("does not reorder its input", () => {
    const samples = [3, 1, 2];
    summarize(samples);
    expect(samples).toEqual([3, 1, 2]);
  });

  test("errors on empty or non-finite input", () => {
    expect(() => summarize([])).toThrow("no samples");
    expect(() => summarize([1, Number.NaN])).toThrow("not a finite number");
  });
});
