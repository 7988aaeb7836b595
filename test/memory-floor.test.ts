// A point's time against its memory floor (src/profile/memory-floor.ts): each timed step against its bytes at the
// read pass right before it, or at the peaks' rate where its steps were not paired.
import { describe, expect, test } from "bun:test";

import { pointFloor } from "../src/profile/memory-floor.ts";

const PEAKS_BYTES_PER_S = 80e9; // the rate of unpaired steps
const BYTES = 600e6; // 7.5 ms at 80 GB/s, 12.5 ms at 48

describe("pointFloor", () => {
  test("paired: the median over the steps of each against its own pass, and the passes' median", () => {
    // a host flipping between 80 and 48 GB/s, the step 1.2× its floor at 80 and 1.05× at 48
    const steps = [
      { ms: 9.0, read: 80e9 },
      { ms: 13.125, read: 48e9 },
      { ms: 13.125, read: 48e9 },
      { ms: 9.0, read: 80e9 },
      { ms: 13.125, read: 48e9 },
    ];
    const f = pointFloor(steps, BYTES, PEAKS_BYTES_PER_S);
    expect(f.read_bytes_per_s).toBe(48e9);
    expect(f.over_floor).toBeCloseTo(1.05, 12);
    // the median step (13.125 ms) against the peaks' floor (7.5 ms) would have said 1.75×
  });

  test("unpaired (a GPU, or a step the cache serves in part): every step against the peaks' rate", () => {
    const f = pointFloor(
      [
        { ms: 8, read: null },
        { ms: 9, read: null },
        { ms: 30, read: null },
      ],
      BYTES,
      PEAKS_BYTES_PER_S,
    );
    expect(f.read_bytes_per_s).toBeNull();
    expect(f.over_floor).toBeCloseTo(9 / 7.5, 12);
  });

  test("a point with one unpaired step is taken as unpaired: its steps' floors must be of one kind", () => {
    const f = pointFloor(
      [
        { ms: 9, read: 80e9 },
        { ms: 9, read: null },
        { ms: 9, read: 48e9 },
      ],
      BYTES,
      PEAKS_BYTES_PER_S,
    );
    expect(f.read_bytes_per_s).toBeNull();
    expect(f.over_floor).toBeCloseTo(9 / 7.5, 12);
  });

  test("no timed step is an error, not a floor of nothing", () => {
    expect(() => pointFloor([], BYTES, PEAKS_BYTES_PER_S)).toThrow(/no timed step/);
  });
});
