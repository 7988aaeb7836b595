import { describe, expect, test } from "bun:test";
import type { HostInterval, OpInterval } from "../src/backends/instrument.ts";
import { ALL_PRESETS } from "../src/model/architectures.ts";
import { DEFAULT_STEP_FORM } from "../src/plan.ts";
import { weightReadingFamilies } from "../src/profile/summary.ts";
import type { KernelRegime, SeedRow, StepTrace } from "../src/profile/types.ts";
import {
  aggregateOps,
  buildBreakdown,
  byFamily,
  byLayer,
  familyMsPerStep,
  medianSplit,
  opTimesMs,
  overlappingOps,
  stepSplit,
  unionMs,
} from "../src/profile/aggregate.ts";
import {
  atReferenceRate,
  attentionBandwidthVerdict,
  cacheRegimeVerdict,
  seedVerdict,
  splitVerdicts,
  type ModeSplit,
} from "../src/profile/verdicts.ts";
import { syntheticSteps } from "./helpers/synthetic-profile.ts";

function op(
  index: number,
  family: OpInterval["family"],
  layer: number | null,
  start_us: number,
  end_us: number,
): OpInterval {
  return {
    index,
    family,
    layer,
    label: layer === null ? family : `h${layer}.${family}`,
    name: `${family}_k`,
    start_us,
    end_us,
  };
}
const launch = (start_us: number, end_us: number): HostInterval => ({
  kind: "launch",
  name: "cudaLaunchKernel",
  start_us,
  end_us,
});

describe("unionMs", () => {
  test("merges overlapping and touching intervals, counts gaps out", () => {
    const spans = [
      { start_us: 0, end_us: 1000 },
      { start_us: 500, end_us: 1500 }, // overlaps the first
      { start_us: 1500, end_us: 2000 }, // touches
      { start_us: 3000, end_us: 3500 }, // after a 1000 µs gap
      { start_us: 3100, end_us: 3200 }, // nested
    ];
    expect(unionMs(spans)).toBe(2.5);
    expect(unionMs([])).toBe(0);
  });
});

describe("aggregateOps", () => {
  const steps: StepTrace[] = [
    {
      mode: "eager",
      context: 8,
      host: [],
      ops: [op(0, "linear", 0, 0, 300), op(1, "gelu", 0, 300, 400), op(2, "linear", 1, 400, 500)],
    },
    {
      mode: "eager",
      context: 8,
      host: [],
      ops: [op(0, "linear", 0, 1000, 1200), op(1, "gelu", 0, 1200, 1300), op(2, "lm_head", null, 1300, 1400)],
    },
  ];

  test("per family: calls, totals, per-call statistics, shares, sorted by total", () => {
    const rows = aggregateOps(steps, byFamily);
    expect(rows.map((r) => r.key)).toEqual(["linear", "gelu", "lm_head"]);
    const linear = rows[0]!;
    expect(linear.calls).toBe(3);
    expect(linear.total_ms).toBeCloseTo(0.6, 12);
    expect(linear.mean_ms).toBeCloseTo(0.2, 12);
    expect(linear.median_ms).toBeCloseTo(0.2, 12);
    expect(linear.min_ms).toBeCloseTo(0.1, 12);
    expect(linear.max_ms).toBeCloseTo(0.3, 12);
    expect(linear.stddev_ms).toBeCloseTo(0.1, 12);
    expect(linear.share).toBeCloseTo(0.6 / 0.9, 12); // 0.9 ms of ops in all
    expect(rows.reduce((a, r) => a + r.share, 0)).toBeCloseTo(1, 12);
  });

  test("per layer: blocks as h<n>, ops outside the blocks by label", () => {
    const rows = aggregateOps(steps, byLayer);
    expect(rows.map((r) => [r.key, r.calls])).toEqual([
      ["h0", 4],
      ["h1", 1],
      ["lm_head", 1],
    ]);
  });

  test("breakdown's op time is the median step's, the step the split is of: its ops are its busy time", () => {
    // steps of 0.5 and 0.4 ms: the lower middle is the 0.4 ms one (a median of the two sums, 0.45, is neither step)
    expect(buildBreakdown(steps).op_sum_ms).toBeCloseTo(0.4, 12);
    expect(medianSplit(steps).busy_ms).toBeCloseTo(0.4, 12);
    expect(medianSplit(steps).step_ms).toBeCloseTo(0.4, 12);
    expect(buildBreakdown(steps).overlapping_ops).toBe(0);
  });
});

describe("overlapping ops (graph-pdl: each kernel starts while its predecessor runs)", () => {
  // synthetic records: kernel 1 starts 100 µs into kernel 0 and sits in its wait until kernel 0 ends; kernel 2 starts
  // inside kernel 1 and even before kernel 0 ends; then a 50 µs gap before kernel 3 (idle, charged to no op)
  const overlapped: StepTrace = {
    mode: "graph-pdl",
    context: 8,
    host: [],
    ops: [
      op(0, "ln_qkv", 0, 0, 300),
      op(1, "attention", 0, 100, 400),
      op(2, "linear_residual", 0, 250, 700),
      op(3, "ln_linear_gelu", 0, 750, 900),
    ],
  };

  test("each op counts from the later of its start and its predecessor's end: the ops sum to the busy time, not past the step", () => {
    expect(opTimesMs(overlapped).map((t) => t.ms)).toEqual([0.3, 0.1, 0.3, 0.15]);
    const durations = overlapped.ops.reduce((a, o) => a + (o.end_us - o.start_us) / 1e3, 0);
    expect(durations).toBeCloseTo(1.2, 12); // the records alone exceed the 0.9 ms step
    const b = buildBreakdown([overlapped]);
    expect(b.op_sum_ms).toBeCloseTo(stepSplit(overlapped).busy_ms, 12);
    expect(b.op_sum_ms).toBeCloseTo(0.85, 12);
    expect(b.overlapping_ops).toBe(2);
    expect(b.families.find((f) => f.key === "attention")!.total_ms).toBeCloseTo(0.1, 12);
    expect(b.families.reduce((a, f) => a + f.share, 0)).toBeCloseTo(1, 12);
  });

  test("records out of plan order are counted in plan order; ops one after another keep their durations", () => {
    const shuffled: StepTrace = { ...overlapped, ops: [...overlapped.ops].reverse() };
    expect(opTimesMs(shuffled).map((t) => [t.op.index, t.ms])).toEqual([
      [0, 0.3],
      [1, 0.1],
      [2, 0.3],
      [3, 0.15],
    ]);
    const sequential: StepTrace = {
      mode: "eager",
      context: 8,
      host: [],
      ops: [op(0, "linear", 0, 0, 300), op(1, "gelu", 0, 300, 400), op(2, "linear", 1, 420, 500)],
    };
    expect(opTimesMs(sequential).map((t) => t.ms)).toEqual([0.3, 0.1, 0.08]);
    expect(overlappingOps(shuffled)).toBe(2);
  });

  test("family time per step uses the marginal times too", () => {
    expect(familyMsPerStep([overlapped]).get("attention")).toBeCloseTo(0.1, 12);
  });
});

describe("stepSplit", () => {
  test("busy is the union of overlapping ops; idle is the rest of the step", () => {
    const step: StepTrace = {
      mode: "eager",
      context: 1,
      host: [
        { kind: "step", name: "step", start_us: 0, end_us: 400 },
        launch(10, 60),
        launch(100, 150),
        launch(140, 200),
      ],
      ops: [op(0, "linear", 0, 100, 300), op(1, "gelu", 0, 250, 350), op(2, "argmax", null, 800, 1000)],
    };
    const s = stepSplit(step);
    expect(s.step_ms).toBe(1);
    expect(s.busy_ms).toBeCloseTo(0.45, 12); // [100, 350] + [800, 1000]
    expect(s.idle_ms).toBeCloseTo(0.55, 12);
    expect(s.host_issue_ms).toBeCloseTo(0.4, 12);
    expect(s.launch_api_ms).toBeCloseTo(0.15, 12); // 50 + [100, 200]
  });

  test("the median split of the synthetic eager steps shows a waiting device", () => {
    const eager = syntheticSteps().filter((s) => s.mode === "eager" && s.context === 32);
    const s = medianSplit(eager);
    expect(s.idle_ms / s.step_ms).toBeGreaterThan(0.5);
    expect(s.busy_ms + s.idle_ms).toBeCloseTo(s.step_ms, 12);
  });
});

function split(step_ms: number, busy_ms: number, launch_api_ms = 0): ModeSplit["split"] {
  return { step_ms, busy_ms, idle_ms: step_ms - busy_ms, host_issue_ms: step_ms * 0.9, launch_api_ms };
}
const mode = (m: ModeSplit["mode"], s: ModeSplit["split"]): ModeSplit => ({
  mode: m,
  context: 1000,
  split: s,
  untraced_ms: s.step_ms,
  untraced_p10_ms: s.step_ms * 0.98,
  untraced_p90_ms: s.step_ms * 1.02,
  paired_over_floor: null,
  ops_per_step: 147,
});

describe("splitVerdicts", () => {
  test("one sentence per mode, with the idle share and graph saving computed from the numbers", () => {
    const { sentences } = splitVerdicts([mode("eager", split(5.2, 1.5, 3.1)), mode("graph", split(1.8, 1.6))]);
    expect(sentences).toHaveLength(2);
    expect(sentences[0]!.sentence).toContain("eager (context 1000): the device is idle 71% of the 5.20 ms step");
    expect(sentences[0]!.sentence).toContain("3.10 ms of it inside launch calls");
    expect(sentences[1]!.sentence).toContain("graph replay removes 3.40 ms per token (65% of eager)");
  });

  test("supports launch overhead when the device idles and the graph recovers it", () => {
    const { conclusion } = splitVerdicts([mode("eager", split(5.2, 1.5)), mode("graph", split(1.8, 1.6))]);
    expect(conclusion).toStartWith("Is the floor launch overhead? Mostly yes");
  });

  test("says no when the device is busy and the graph changes little", () => {
    const { conclusion, sentences } = splitVerdicts([mode("eager", split(5.0, 4.6)), mode("graph", split(4.9, 4.6))]);
    expect(conclusion).toStartWith("Is the floor launch overhead? No");
    expect(sentences[1]!.sentence).toContain("same time per token as eager");
  });

  test("says not launch overhead alone when the device idles but the graph does not help", () => {
    const { conclusion } = splitVerdicts([mode("eager", split(5.0, 1.0)), mode("graph", split(4.6, 1.0))]);
    expect(conclusion).toContain("Not launch overhead alone");
  });

  test("is undecided without a graph mode or without eager", () => {
    expect(splitVerdicts([mode("eager", split(5.0, 1.0))]).conclusion).toContain("Not tested with a graph");
    expect(splitVerdicts([mode("graph", split(5.0, 1.0))]).conclusion).toContain("Undecided");
  });

  test("without a graph, compares eager with the natively issued step", () => {
    const { conclusion } = splitVerdicts([mode("eager", split(5.0, 4.9)), mode("eager-native", split(4.0, 3.9))]);
    expect(conclusion).toContain("idles 2% of the 5.00 ms eager step, which suggests op time, not launch overhead");
    expect(conclusion).toContain("natively in one call takes 4.00 ms against 5.00 ms from TypeScript");
  });

  test("where the steps were paired with read passes, compares modes at eager's read rate", () => {
    // the native step ran while the memory was fast: 4.0 ms raw, yet 1.03× its floor against eager's 1.00×
    const eager = { ...mode("eager", split(5.0, 4.9)), untraced_ms: 5.0, paired_over_floor: 1.0 };
    const native = { ...mode("eager-native", split(4.0, 3.9)), untraced_ms: 4.0, paired_over_floor: 1.03 };
    const { sentences, conclusion } = splitVerdicts([eager, native]);
    expect(sentences[1]!.sentence).toContain(
      "; it takes the same time per token as eager (within 5%, at eager's memory read rate; its step 4.00 ms as timed)",
    );
    expect(conclusion).toContain(
      "natively in one call takes 5.15 ms against 5.00 ms from TypeScript, at eager's memory read rate; its step 4.00 ms as timed",
    );
  });

  test("atReferenceRate: paired steps at the reference's rate, unpaired ones as measured", () => {
    expect(atReferenceRate(5.0, 1.0, 4.0, 1.03)).toBeCloseTo(5.15, 12);
    expect(atReferenceRate(5.0, null, 4.0, 1.03)).toBe(4.0);
    expect(atReferenceRate(5.0, 1.0, 4.0, null)).toBe(4.0);
  });

  test("a difference inside both modes' p10–p90 intervals is said to be within the steps' spread", () => {
    const eager = { ...mode("eager", split(5.0, 4.9)), untraced_p10_ms: 4.5, untraced_p90_ms: 6.0 };
    const native = { ...mode("eager-native", split(4.5, 4.4)), untraced_p10_ms: 4.2, untraced_p90_ms: 5.5 };
    expect(splitVerdicts([eager, native]).sentences[1]!.sentence).toContain(
      "; at the median issuing the plan natively removes 0.500 ms per token (10% of eager), within the steps' spread " +
        "(p10–p90 4.20–5.50 ms against eager's 4.50–6.00 ms)",
    );
    // apart: the plain difference
    native.untraced_p90_ms = 4.45;
    expect(splitVerdicts([eager, native]).sentences[1]!.sentence).toContain(
      "; issuing the plan natively removes 0.500 ms per token (10% of eager).",
    );
  });

  test("compares modes by their untraced step times, not the traced ones", () => {
    const eager = { ...mode("eager", split(5.0, 1.0)), untraced_ms: 4.0 };
    const graph = { ...mode("graph", split(2.0, 1.0)), untraced_ms: 3.0 };
    expect(splitVerdicts([eager, graph]).sentences[1]!.sentence).toContain(
      "graph replay removes 1.00 ms per token (25% of eager)",
    );
  });
});

describe("seedVerdict", () => {
  test("contrasts FLOP reduction and speedup", () => {
    const row = {
      context: 1000,
      fill: "prefill" as const,
      uncached_ms: 31,
      uncached_model_ms: null,
      cached: { eager: { ms: 5.2, speedup: 31 / 5.2 }, graph: { ms: 5.1, speedup: 31 / 5.1 } },
      flop_reduction: 417.4,
      kv_byte_share: 0.1,
      read_bytes_per_s: null,
      floor_ms: 4,
      over_floor: 5.1 / 4,
    };
    expect(seedVerdict(row)).toBe(
      "At context 1000 the KV cache does 417× fewer FLOPs but the step is only 6.1× faster (31.0 ms → 5.10 ms).",
    );
  });
});

describe("cacheRegimeVerdict", () => {
  // the floor (8 ms of weights at the rate it is taken at) grows with the cache's share of the bytes
  const row = (context: number, ms: number, kv_byte_share: number, read: number | null = null): SeedRow => ({
    context,
    fill: "prefill",
    uncached_ms: null,
    uncached_model_ms: null,
    cached: { eager: { ms, speedup: null }, "eager-native": { ms: ms * 1.1, speedup: null } },
    flop_reduction: 1,
    kv_byte_share,
    read_bytes_per_s: read,
    floor_ms: 8 / (1 - kv_byte_share),
    over_floor: ms / (8 / (1 - kv_byte_share)),
  });

  test("at the largest context: the cache's share of the bytes, the step's growth over the shortest, the regime", () => {
    expect(cacheRegimeVerdict([row(256, 12, 0.02), row(32768, 27.6, 0.58)])).toEqual([
      "At context 32768 the cache is 58% of the step's bytes (work model) and the step is 2.3× its time at context 256: the floor is the cache, not the weights.",
    ]);
    expect(cacheRegimeVerdict([row(8, 10, 0.001), row(2048, 12, 0.2)])[0]).toEndWith(
      "the weights are still most of the floor, the cache a visible part of it.",
    );
    expect(cacheRegimeVerdict([row(8, 10, 0.001), row(64, 10.1, 0.01)])[0]).toEndWith(
      "the floor is the weights; the cache barely shows.",
    );
  });

  test("a step that grew more than its bytes: the cache's reads cost more than their share", () => {
    // bytes 1.04× (4% of them the cache at 1000), the step 1.3×: more than 1.15× its bytes
    expect(cacheRegimeVerdict([row(8, 10, 0.001), row(1000, 13, 0.04)])).toEqual([
      "At context 1000 the cache is 4% of the step's bytes (work model) and the step is 1.3× its time at context 8, " +
        "more than its bytes, which grew 1.04×: the weights are most of the bytes, but the cache's reads cost more than their share.",
    ]);
    // 1.15× its bytes or less: the bytes explain it
    expect(cacheRegimeVerdict([row(8, 10, 0.001), row(1000, 11.9, 0.04)])[0]).toEndWith(
      "its time at context 8: the floor is the weights; the cache barely shows.",
    );
    // paired with read passes: the growth at one read rate (here the memory read 1.3× slower at 1000, all of the growth)
    const [first, last] = [row(8, 10, 0.001, 65e9), row(1000, 13.5, 0.04, 50e9)];
    Object.assign(last, { floor_ms: (last.floor_ms * 65) / 50, over_floor: 1.0 });
    Object.assign(first, { over_floor: 1.0 });
    expect(cacheRegimeVerdict([first, last])[0]).not.toContain("more than its bytes");
  });

  test("a memory read rate that moved between the contexts' timings: the growth at one rate, each step over its floor", () => {
    // the host's memory read 60 GB/s beside context 8's steps and 45 beside context 1000's: 1.33× slower
    const [first, last] = [
      { ...row(8, 8.4, 0.001, 60e9), floor_ms: 8, over_floor: 1.05 },
      { ...row(1000, 13.8, 0.08, 45e9), floor_ms: 11.5, over_floor: 1.2 },
    ];
    // bytes 1.08× (8 ms at 60 GB/s, 11.5 at 45), the step at one rate 1.23×: within 1.15× of them
    expect(cacheRegimeVerdict([first, last])).toEqual([
      "At context 1000 the cache is 8% of the step's bytes (work model) and the step is 1.6× its time at context 8 — " +
        "but the memory read 1.33× slower beside its steps than beside context 8's: at one read rate the step is 1.2× " +
        "its time there, 1.05× and 1.20× the floor read beside each: the floor is the weights; the cache barely shows.",
    ]);
    // within READ_DRIFT (5%), or untracked on either side: the plain sentence
    const plain = cacheRegimeVerdict([row(8, 8.4, 0.001, 60e9), row(1000, 8.9, 0.08, 58e9)])[0]!;
    expect(plain).not.toContain("memory read");
    expect(plain).not.toContain("more than its bytes");
    expect(cacheRegimeVerdict([row(8, 8.4, 0.001, 60e9), row(1000, 8.9, 0.08)])[0]).toBe(plain);
  });

  test("nothing to say with one context, or none timed", () => {
    expect(cacheRegimeVerdict([row(256, 12, 0.02)])).toEqual([]);
    expect(
      cacheRegimeVerdict([
        { ...row(8, 1, 0), cached: {} },
        { ...row(64, 1, 0), cached: {} },
      ]),
    ).toEqual([]);
  });
});

describe("attentionBandwidthVerdict", () => {
  const regime = (family: string, mode: string, context: number, gbs: number) =>
    ({ family, mode, context, bytes_per_s: gbs * 1e9 }) as unknown as KernelRegime;
  const matvecs = new Set(["rms_qkv_rope", "rms_gate_up", "linear_residual"]);

  test("at the longest context traced, per cached mode: the attention's read rate against the matvecs' range", () => {
    const regimes = [
      regime("attention", "eager", 256, 20),
      regime("rms_qkv_rope", "eager", 256, 60),
      regime("attention", "eager", 8191, 46.1),
      regime("rms_qkv_rope", "eager", 8191, 56.5),
      regime("rms_gate_up", "eager", 8191, 63.7),
      regime("embed", "eager", 8191, 5), // reads one row of the embeddings: not a matvec
      regime("attention", "eager-native", 8191, 48.2),
      regime("linear_residual", "eager-native", 8191, 58.3),
      regime("attention", "uncached", 8191, 1), // the baseline's attention is not the decode attention
    ];
    expect(attentionBandwidthVerdict(regimes, matvecs)).toEqual([
      "At context 8191, in the same traced steps, the decode attention read 46.1 GB/s against 56.5–63.7 GB/s for the ops " +
        "that read the weights in eager (0.72–0.82×), and 48.2 GB/s against 58.3 GB/s in eager-native (0.83×) " +
        "(each op's bytes by the work model over its traced time).",
    ]);
  });

  test("the ops that read the weights: the matvecs of either plan, not a norm, the rotary table or the embedding", () => {
    const llama = ALL_PRESETS["llama-3.2-1b"]!;
    const families = (plan: "fused" | "unfused") =>
      [...weightReadingFamilies(llama, { ...DEFAULT_STEP_FORM, plan })].sort();
    expect(families("fused")).toEqual(["linear_residual", "rms_gate_up", "rms_lm_head_argmax", "rms_qkv_rope"]);
    expect(families("unfused")).toEqual(["linear", "lm_head"]);
    // GPT-2's embedding reads two weight rows to write one: weights, but no matvec
    const gpt2 = (plan: "fused" | "unfused") =>
      [...weightReadingFamilies(ALL_PRESETS.gpt2!, { ...DEFAULT_STEP_FORM, plan })].sort();
    expect(gpt2("fused")).toEqual(["linear_residual", "ln_linear_gelu", "ln_lm_head_argmax", "ln_qkv"]);
    expect(gpt2("unfused")).toEqual(["linear", "lm_head"]);
  });

  test("the first mode with matvecs to compare names them, whichever mode comes first", () => {
    const regimes = [
      regime("attention", "eager", 8191, 40),
      regime("attention", "eager-native", 8191, 48.2),
      regime("linear_residual", "eager-native", 8191, 58.3),
    ];
    expect(attentionBandwidthVerdict(regimes, matvecs)[0]).toContain(
      "read 48.2 GB/s against 58.3 GB/s for the ops that read the weights in eager-native (0.83×)",
    );
  });

  test("nothing where no cached step's attention was traced", () => {
    expect(attentionBandwidthVerdict([regime("rms_gate_up", "eager", 8191, 60)], matvecs)).toEqual([]);
    expect(attentionBandwidthVerdict([regime("attention", "uncached", 8191, 1)], matvecs)).toEqual([]);
  });
});
