// The synthetic cache fill (run/synthetic-fill.ts) and the study's fill decisions (profile/fill.ts): the real
// prefix is a prefill's bit for bit, the drawn rows follow its columns' distribution in every cache dtype, only the
// sequence's own rows [0, context) are written, and a decode step there is finite; a point is prefilled or not, and
// its uncached baseline timed or modelled, by the measured prefill rate.
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";

import { CpuBackend } from "../src/backends/cpu.ts";
import { familyNameOf, kvColumns, loadAnyModel, type ModelWeights } from "../src/model/architectures.ts";
import { bf16Value } from "../src/model/dtypes.ts";
import { randomWeights } from "../src/model/gpt2.ts";
import type { DtypeName } from "../src/ops.ts";
import { DEFAULT_STEP_FORM } from "../src/plan.ts";
import { PREFILL_LIMIT_S, PrefillRate, pointFill, UNCACHED_TIMED_LIMIT_S } from "../src/profile/fill.ts";
import { promptOf } from "../src/profile/prompts.ts";
import { sumWork, uncachedStepWork } from "../src/profile/work-model.ts";
import { launchMode } from "../src/run/launch-modes.ts";
import { llamaSequenceView } from "../src/run/llama-buffers.ts";
import { sequenceView } from "../src/run/gpt2-buffers.ts";
import { Session } from "../src/run/session.ts";
import { SYNTHETIC_SAMPLE_ROWS } from "../src/run/synthetic-fill.ts";

const cpu = CpuBackend.open();
afterAll(() => cpu.close());

const POISON = 0x7fc07fc0; // a NaN as fp32, and two NaNs as bf16 or f16 halves
const CONTEXT = 100; // 64 real rows, 36 drawn
const MODELS: [string, ModelWeights][] = [
  [
    "gpt2 (n_positions 128)",
    randomWeights({
      name: "gpt2-synthetic-fill",
      n_layer: 2,
      n_head: 2,
      n_embd: 64,
      n_positions: 128,
      vocab_size: 97,
      layer_norm_epsilon: 1e-5,
    }),
  ],
  ["llama-tiny", loadAnyModel(join(import.meta.dir, "fixtures/llama-tiny"))],
];

/** Every layer's K then V rows [0, rows) of sequence b, widened to fp32: (layers × 2, rows × cols). */
function cacheRows(s: Session<ModelWeights>, b: number, rows: number, kv: DtypeName): Float32Array[] {
  const buffers = s.resident.buffers;
  const view =
    familyNameOf(s.config) === "gpt2"
      ? sequenceView(buffers as Parameters<typeof sequenceView>[0], b)
      : llamaSequenceView(buffers as Parameters<typeof llamaSequenceView>[0], b);
  const n = rows * kvColumns(s.config);
  return [...view.kCache, ...view.vCache].map((ptr) => {
    const region = { ptr, bytes: n * (kv === "f32" ? 4 : 2) };
    if (kv === "f32") {
      const out = new Float32Array(n);
      cpu.download(region, out);
      return out;
    }
    const raw = kv === "f16" ? new Float16Array(n) : new Uint16Array(n);
    cpu.download(region, raw);
    return kv === "f16" ? Float32Array.from(raw) : Float32Array.from(raw as Uint16Array, bf16Value);
  });
}

/** Per column: mean and standard deviation of rows [r0, r1) of a (rows, cols) matrix. */
function columnStats(m: Float32Array, cols: number, r0: number, r1: number) {
  return Array.from({ length: cols }, (_, c) => {
    const xs = Array.from({ length: r1 - r0 }, (_, i) => m[(r0 + i) * cols + c]!);
    const mean = xs.reduce((a, x) => a + x, 0) / xs.length;
    const std = Math.sqrt(xs.reduce((a, x) => a + (x - mean) ** 2, 0) / (xs.length - 1));
    return { mean, std };
  });
}

describe.each(MODELS)("fillSynthetic on %s", (_, weights) => {
  test.each(["f32", "bf16", "f16"] as const)("cache stored as %s", (kv) => {
    const s = new Session(cpu, weights, { form: { ...DEFAULT_STEP_FORM, batch: 2, kv } });
    try {
      const cols = kvColumns(s.config);
      const held = s.config.n_positions;
      cpu.fill32(s.resident.allocations.cache, POISON);
      const prompt = promptOf(CONTEXT, s.config.vocab_size, 5);
      s.fillSynthetic(prompt, 11, 1);

      // only sequence 1's rows [0, CONTEXT) were written
      for (const layer of cacheRows(s, 0, held, kv)) expect(layer.every(Number.isNaN)).toBe(true);
      const filled = cacheRows(s, 1, held, kv);
      for (const layer of filled) {
        expect(layer.subarray(0, CONTEXT * cols).every(Number.isFinite)).toBe(true);
        expect(layer.subarray(CONTEXT * cols).every(Number.isNaN)).toBe(true);
      }
      expect(s.position(1)).toBe(CONTEXT);
      expect(s.readSequence(CONTEXT + 1, 1)).toEqual([...prompt, prompt[CONTEXT - 1]!]);

      // the drawn rows follow each column of the real ones: means within half a spread, spreads within 2×
      for (const layer of filled) {
        const real = columnStats(layer, cols, 0, SYNTHETIC_SAMPLE_ROWS);
        const drawn = columnStats(layer, cols, SYNTHETIC_SAMPLE_ROWS, CONTEXT);
        const meanGap = drawn.reduce((a, d, c) => a + Math.abs(d.mean - real[c]!.mean) / real[c]!.std, 0) / cols;
        const spread = drawn.reduce((a, d, c) => a + d.std / real[c]!.std, 0) / cols;
        expect(meanGap).toBeLessThan(0.5);
        expect(spread).toBeGreaterThan(0.5);
        expect(spread).toBeLessThan(2);
      }

      // a decode step on the filled sequence alone is finite
      launchMode("eager").run(s.sequenceStep(1, 1), 1);
      s.checkLogits("after a synthetic fill", 1, () => s.setPosition(CONTEXT, 1), 1);
      expect(s.position(1)).toBe(CONTEXT + 1);

      // the real rows are a prefill's, bit for bit (sequence 0 prefilled with the same first tokens)
      s.prefill(prompt.slice(0, SYNTHETIC_SAMPLE_ROWS), 0);
      const prefilled = cacheRows(s, 0, SYNTHETIC_SAMPLE_ROWS, kv);
      for (const [i, layer] of prefilled.entries())
        expect(Array.from(filled[i]!.subarray(0, SYNTHETIC_SAMPLE_ROWS * cols))).toEqual(Array.from(layer));
    } finally {
      s.close();
    }
  });

  test("a context past the positions held is refused", () => {
    const s = new Session(cpu, weights);
    try {
      const n = s.config.n_positions;
      expect(() => s.fillSynthetic(promptOf(n, s.config.vocab_size, 1), 1)).toThrow(/context overflow/);
    } finally {
      s.close();
    }
  });
});

describe("the study's fill decisions", () => {
  const cfg = MODELS[1]![1].config;
  const flops = (tokens: number) => sumWork(uncachedStepWork(cfg, tokens - 1, DEFAULT_STEP_FORM)).flops;
  /** a rate under which a prefill of `tokens` takes `seconds` */
  const rateFor = (tokens: number, seconds: number) => {
    const rate = new PrefillRate(cfg, DEFAULT_STEP_FORM);
    rate.observe(tokens, seconds * 1e3);
    return rate;
  };

  test("the rate is the longest timed prefill's, and none is no estimate", () => {
    const rate = new PrefillRate(cfg, DEFAULT_STEP_FORM);
    expect(() => rate.seconds(10)).toThrow(/no prefill/);
    rate.observe(64, 2);
    rate.observe(8, 1000); // shorter: ignored
    expect(rate.measured).toBeCloseTo(flops(64) / 2e-3, 0);
    expect(rate.seconds(64)).toBeCloseTo(0.002, 9);
  });

  test("auto prefills up to the limit, and times the uncached step up to its own", () => {
    const rate = rateFor(100, PREFILL_LIMIT_S); // 100 tokens take the limit exactly
    expect(pointFill(100, "auto", rate, true).fill).toBe("prefill");
    expect(pointFill(101, "auto", rate, true).fill).toBe("synthetic");
    expect(pointFill(SYNTHETIC_SAMPLE_ROWS, "auto", rateFor(10, 1000), true).fill).toBe("prefill");
    const timedRate = rateFor(50, UNCACHED_TIMED_LIMIT_S); // the uncached step at context 49 recomputes 50 rows
    expect(pointFill(49, "auto", timedRate, true)).toEqual({
      context: 49,
      fill: "prefill",
      uncached_timed: true,
      uncached_model_ms: null,
    });
    const past = pointFill(50, "auto", timedRate, true);
    expect(past.uncached_timed).toBe(false);
    expect(past.uncached_model_ms!).toBeCloseTo(timedRate.seconds(51) * 1e3, 6);
  });

  test("a forced method holds past the real prefix; without the uncached mode nothing is modelled", () => {
    const rate = rateFor(10, 1000);
    expect(pointFill(SYNTHETIC_SAMPLE_ROWS + 1, "synthetic", rate, true).fill).toBe("synthetic");
    expect(pointFill(SYNTHETIC_SAMPLE_ROWS, "synthetic", rate, true).fill).toBe("prefill"); // its real prefix alone
    expect(pointFill(127, "prefill", rate, true).fill).toBe("prefill");
    expect(pointFill(127, "prefill", rate, false)).toMatchObject({ uncached_timed: true, uncached_model_ms: null });
  });
});
