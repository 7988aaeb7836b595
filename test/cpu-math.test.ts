// cuda/cpu_math.h's lane sums, bit for bit against scalar trees: each build's vector width (16 lanes with AVX-512
// where the host has it, 8 with AVX, 4 without), on fresh random vectors whose magnitudes differ by up to 2^40, so
// that a sum taken in another order gives other bits. The attention's dot products rest on these sums being the
// same tree whichever lane or shuffle takes them (a whole block's dot products have the same bits on every path).
import { describe, expect, test } from "bun:test";

import { compileAndRun } from "./helpers/cpp.ts";
import { freshSeed } from "./helpers/device.ts";

const TRIALS = 20000;
const seed = freshSeed();
console.log(`cpu-math: SEED=${seed}`);

// Prints "lanes N", then for each check "<name> <trials whose bits differ from the scalar tree>", and "reordered
// <trials where adding the lanes left to right gives other bits than the pairwise tree>".
const PROGRAM = `
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "cpu_math.h"

static unsigned long long state;
static unsigned next_bits() { state = state * 6364136223846793005ULL + 1442695040888963407ULL; return state >> 33; }
static float mixed() {  // a sign, 24 bits of mantissa and an exponent in [-20, 20)
  return ((next_bits() & 1) ? -1.0f : 1.0f) * (1.0f + (next_bits() & 0xffffff) / 16777216.0f) *
         __builtin_ldexpf(1.0f, (int)(next_bits() % 40) - 20);
}
static float pairwise(const float* x, int n) {  // adjacent lanes added, level by level
  float level[kVecFloats];
  memcpy(level, x, sizeof(float) * n);
  for (; n > 1; n /= 2)
    for (int i = 0; i < n / 2; i++) level[i] = level[2 * i] + level[2 * i + 1];
  return level[0];
}
static float halves(const float* x, int n) {  // the high half added to the low half, until one lane is left
  float level[kVecFloats];
  memcpy(level, x, sizeof(float) * n);
  for (; n > 1; n /= 2)
    for (int i = 0; i < n / 2; i++) level[i] = level[i] + level[i + n / 2];
  return level[0];
}
static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

int main(int argc, char** argv) {
  state = strtoull(argv[1], nullptr, 10);
  const int trials = atoi(argv[2]);
  int each = 0, one = 0, reordered = 0;
  for (int t = 0; t < trials; t++) {
    float x[kVecFloats][kVecFloats];
    vecf v[kVecFloats];
    for (int j = 0; j < kVecFloats; j++) {
      for (int i = 0; i < kVecFloats; i++) x[j][i] = mixed();
      memcpy(&v[j], x[j], sizeof v[j]);
    }
    const vecf sums = sum_lanes_each(v);
    for (int j = 0; j < kVecFloats; j++) {
      float left_to_right = 0.0f;
      for (int i = 0; i < kVecFloats; i++) left_to_right += x[j][i];
      vecf w;
      memcpy(&w, x[j], sizeof w);
      if (!same_bits(sums[j], pairwise(x[j], kVecFloats))) each++;
      if (!same_bits(sum_lanes(w), halves(x[j], kVecFloats))) one++;
      if (!same_bits(left_to_right, pairwise(x[j], kVecFloats))) reordered++;
    }
  }
  printf("lanes %d\\nsum_lanes_each %d\\nsum_lanes %d\\nreordered %d\\n", kVecFloats, each, one, reordered);
}
`;

/** The program's counts, built with -march=native and `flags` (as test/cpu-ops.test.ts builds its variants). */
function laneSums(flags: string[]): Map<string, number> {
  const output = compileAndRun("lane-sum", PROGRAM, ["-O3", "-march=native", ...flags], [String(seed), String(TRIALS)]);
  return new Map(
    output
      .trim()
      .split("\n")
      .map((line) => {
        const [name, count] = line.split(" ");
        return [name!, Number(count)];
      }),
  );
}

describe("lane sums against scalar trees, bit for bit", () => {
  test.each([
    ["native", [], null],
    ["no-avx512", ["-mno-avx512f"], 8],
    ["no-avx", ["-mno-avx"], 4],
  ] as const)("%s build", (_, flags, lanes) => {
    const counts = laneSums([...flags]);
    if (lanes !== null) expect(counts.get("lanes")).toBe(lanes);
    // the inputs tell the orders apart: left to right gives other bits in many sums (17% of them with 4 lanes)
    expect(counts.get("reordered")).toBeGreaterThan((TRIALS * counts.get("lanes")!) / 10);
    expect(counts.get("sum_lanes_each")).toBe(0);
    expect(counts.get("sum_lanes")).toBe(0);
  });
});
