// The kernel model (src/profile/kernel-model/: model.ts and its inputs, inputs.ts): the relations its
// predictions must keep, and the launch shapes and kernel facts it reads from the C side through the emulator. No
// timing is measured or asserted here: the model's numbers are predictions.
import { afterAll, describe, expect, test } from "bun:test";

import { CudaBackend } from "../src/backends/cuda.ts";
import { ALL_PRESETS } from "../src/model/architectures.ts";
import { GPT2_FAMILY, PRESETS } from "../src/model/gpt2.ts";
import { namedArgs, type DtypeName } from "../src/ops.ts";
import { DEFAULT_STEP_FORM, encodePlan, type PlanOp } from "../src/plan.ts";
import { planShape } from "../src/plan-gpt2.ts";
import { planShapeOf } from "../src/plans.ts";
import {
  activeLoads,
  blocksBeside,
  GPU_MODELS,
  gpuAt,
  kernelInputs,
  MODEL_MODES,
  persistentKernel,
  predictDecodeStep,
  predictKernel,
  predictStep,
  rowGroups,
  type KernelInput,
  type PersistentKernel,
} from "../src/profile/kernel-model/index.ts";

const h200 = GPU_MODELS.h200;
const gpt2 = PRESETS.gpt2!;
const emu = CudaBackend.open({ emulated: true });
afterAll(() => emu.close());
const shapesOf = (ops: PlanOp[]) => emu.launchShapes(encodePlan(ops));
const facts = emu.kernels.facts;
/** A persistent step kernel of `registers` registers per thread, its later rounds as the library's. */
const persistent = (registers: number): PersistentKernel => ({
  registers,
  laterRoundL2Trips: facts.persistent.laterRoundL2Trips,
});

const matvec: KernelInput = {
  label: "m",
  family: "linear_residual",
  bytes: 9.4e6,
  flops: 4.7e6,
  blocks: 288,
  threads: 256,
  registers: 62,
  loadsInFlight: 8,
  prefetches: true,
  fmaShare: 1,
  lookAheadBytes: 32768,
  chainL2Trips: 3,
  loadBytes: 16,
};

describe("one kernel", () => {
  test("time = max(bytes / bandwidth, flops / rate, latency x bytes / bytes in flight) + the chain's L2 round trips", () => {
    const k = predictKernel(matvec, h200);
    expect(k.residentBlocks).toBe(288); // 4 blocks of 256 threads at 62 registers per SM
    expect(k.bytesInFlight).toBe(288 * 256 * 8 * 16);
    expect(k.bandwidthUs).toBeCloseTo((9.4e6 / 4.3e12) * 1e6, 9);
    expect(k.kernelUs).toBeCloseTo(Math.max(k.bandwidthUs, k.latencyUs) + 3 * 0.15, 9);
  });

  test("fewer loads in flight (a serialised loop) is slower; enough of them makes the kernel bandwidth-bound", () => {
    const serial = predictKernel({ ...matvec, loadsInFlight: 1 }, h200);
    const batched = predictKernel(matvec, h200);
    expect(serial.latencyUs).toBeGreaterThan(batched.latencyUs);
    expect(serial.kernelUs).toBeGreaterThan(batched.kernelUs);
    expect(batched.streamUs).toBe(batched.bandwidthUs);
  });

  test("the arithmetic runs at the fp32 rate its instruction mix allows: a kernel whose FFMAs are a small share turns compute-bound", () => {
    const k = predictKernel({ ...matvec, flops: 8 * matvec.flops, fmaShare: 0.1 }, h200);
    expect(k.computeUs).toBeCloseTo(((8 * 4.7e6) / (67e12 * 0.1)) * 1e6, 9);
    expect(k.bound).toBe("compute");
    expect(predictKernel(matvec, h200).bound).toBe("memory");
  });

  test("registers limit residency: 128 registers leave 2 blocks of 256 threads per SM", () => {
    expect(predictKernel({ ...matvec, registers: 128, blocks: 1000 }, h200).residentBlocks).toBe(2 * h200.sms);
  });
});

describe("GPT-2 small's decode step", () => {
  const fused = predictDecodeStep(gpt2, DEFAULT_STEP_FORM, 1023, h200, emu.kernels, null);
  const unfused = predictDecodeStep(gpt2, { ...DEFAULT_STEP_FORM, plan: "unfused" }, 1023, h200, emu.kernels, null);

  test("the bytes floor is every byte once at the bandwidth; the kernels add to at least it", () => {
    const bytes = planShape(gpt2, 1).reduce((s, op) => s + op.work(1023).bytes, 0);
    expect(fused.bytesFloorUs).toBeCloseTo((bytes / h200.bandwidth.value) * 1e6, 6);
    expect(fused.kernelSumUs).toBeGreaterThan(fused.bytesFloorUs);
  });

  test("per mode: graph adds a gap per kernel, graph-pdl hides some, eager is issued by the host", () => {
    expect(fused.modes.graph).toBeCloseTo(fused.kernelSumUs + 62 * h200.graphNodeUs.value, 6);
    expect(fused.modes["graph-pdl"]!).toBeLessThan(fused.modes.graph!);
    expect(fused.modes["eager-native"]!).toBeGreaterThanOrEqual(62 * h200.nativeHostUs.value);
    expect(fused.modes.eager!).toBeGreaterThan(fused.modes["eager-native"]!);
  });

  test("fusing: 62 launches instead of 136, and every mode both plans have predicted faster; the unfused plan has no persistent step", () => {
    expect(fused.kernels).toHaveLength(62);
    expect(unfused.kernels).toHaveLength(136);
    for (const m of MODEL_MODES.filter((m) => m !== "persistent"))
      expect(fused.modes[m]!).toBeLessThan(unfused.modes[m]!);
    expect(unfused.modes.persistent).toBeNull();
  });

  test("persistent: one graph node and a grid barrier between ops, no faster than the bytes, and slower for a dearer barrier", () => {
    const kernels = kernelInputs(planShape(gpt2, 1), 1023, shapesOf(planShape(gpt2, 1)), facts, null);
    const at = (barrierUs: number, gpu = h200) =>
      predictStep(kernels, { ...gpu, gridBarrierUs: { ...gpu.gridBarrierUs, value: barrierUs } }, persistent(128));
    for (const end of ["optimistic", "pessimistic"] as const) {
      const step = predictStep(kernels, gpuAt(h200, end), persistent(128));
      expect(step.modes.persistent!).toBeGreaterThanOrEqual(step.bytesFloorUs);
    }
    expect(fused.modes.persistent!).toBeGreaterThanOrEqual(fused.bytesFloorUs);
    // a barrier dearer by d costs at most d at each of the 61 barriers (the look-ahead may cover some of it)
    const [cheap, dear] = [at(0.6).modes.persistent!, at(1.6).modes.persistent!];
    expect(dear).toBeGreaterThan(cheap);
    expect(dear - cheap).toBeLessThanOrEqual(61 * 1.0 + 1e-9);
    // with no look-ahead to cover it (a barrier far longer than any op's first blocks take), all of it shows
    expect(at(101).modes.persistent! - at(100).modes.persistent!).toBeCloseTo(61, 6);
  });

  test("persistent look-ahead: it covers at most the op's own memory phase, at most while the memory would idle, and only where the op has one", () => {
    const [first, second] = [predictKernel(matvec, h200), predictKernel(matvec, h200)];
    const node = h200.graphNodeUs.value,
      barrier = h200.gridBarrierUs.value;
    const step = (k: KernelInput, barrierUs: number = barrier) =>
      predictStep(
        [matvec, k],
        { ...h200, gridBarrierUs: { ...h200.gridBarrierUs, value: barrierUs } },
        persistent(matvec.registers),
      ).modes.persistent!;
    // the whole second op fits its look-ahead; the idle time (the first op's merge and the barrier) is shorter than its bytes' time
    expect(first.chainUs + barrier).toBeLessThan(second.bandwidthUs);
    expect(step({ ...matvec, lookAheadBytes: 1e9 })).toBeCloseTo(
      node + first.kernelUs + barrier + second.kernelUs - (first.chainUs + barrier),
      9,
    );
    // a barrier long enough to stream it all: the op is left with its merge
    expect(step({ ...matvec, lookAheadBytes: 1e9 }, 100)).toBeCloseTo(node + first.kernelUs + 100 + second.chainUs, 9);
    // a small look-ahead streams only its own bytes (the blocks' first lines)
    const small = 1024; // bytes per block, x 288 resident blocks
    expect(step({ ...matvec, lookAheadBytes: small }, 100)).toBeCloseTo(
      node + first.kernelUs + 100 + second.kernelUs - ((small * 288) / h200.bandwidth.value) * 1e6,
      9,
    );
    // none: the graph-pdl term, its first round trip hidden behind the first op's non-streaming time
    const hidden = Math.min(h200.dramLatencyUs.value, second.latencyUs, first.kernelUs - first.bandwidthUs);
    expect(step({ ...matvec, lookAheadBytes: 0 })).toBeCloseTo(
      node + first.kernelUs + barrier + second.kernelUs - hidden,
      9,
    );
    // no persistent kernel (null registers): no persistent step
    expect(predictStep([matvec, matvec], h200, null).modes.persistent).toBeNull();
  });

  test("persistent rounds: an op of more virtual blocks than the kernel keeps resident pays each later round's dependent steps", () => {
    // 128 registers: 2 blocks of 256 per SM, 264 resident; c_fc's 288 virtual blocks run in two rounds
    const fits = { ...matvec, blocks: 264 },
      over = { ...matvec, blocks: 288 },
      thrice = { ...matvec, blocks: 3 * 264 };
    const step = (k: KernelInput) => predictStep([matvec, k], h200, persistent(128)).modes.persistent!;
    expect(step(over) - step(fits)).toBeCloseTo(facts.persistent.laterRoundL2Trips * h200.l2LatencyUs.value, 9);
    expect(step(thrice) - step(fits)).toBeCloseTo(2 * facts.persistent.laterRoundL2Trips * h200.l2LatencyUs.value, 9);
    // the graph modes run their own grids, which fit: no rounds there
    expect(predictStep([matvec, over], h200, persistent(128)).modes.graph).toBeCloseTo(
      predictStep([matvec, fits], h200, persistent(128)).modes.graph!,
      9,
    );
  });

  test("graph-pdl: only the blocks that fit beside the predecessor's start early and hide their first round trip", () => {
    // 288 blocks at 3 per SM: 24 SMs hold 3 (4,096 registers left), 108 hold 2 (24,576 left: one more block of 80 x 256)
    const prev = predictKernel({ ...matvec, registers: 80 }, h200);
    expect(blocksBeside(predictKernel({ ...matvec, registers: 80, blocks: 216 }, h200), prev, h200)).toBe(108);
    expect(blocksBeside(predictKernel({ ...matvec, registers: 64, blocks: 528 }, h200), prev, h200)).toBe(108);
    expect(blocksBeside(predictKernel({ ...matvec, registers: 32, blocks: 100 }, h200), prev, h200)).toBe(100); // at most its own blocks
    expect(blocksBeside(predictKernel({ ...matvec, registers: 128, blocks: 216 }, h200), prev, h200)).toBe(0); // 24,576 registers left: none of 32,768
    // the step: a successor with no room beside its predecessor hides nothing; one with room for all of it hides the whole trip
    const pdl = (a: KernelInput, b: KernelInput) => predictStep([a, b], h200).modes["graph-pdl"]!;
    const node = h200.pdlNodeUs!.value;
    const none = { ...matvec, registers: 128, blocks: 216 },
      all = { ...matvec, registers: 40, blocks: 216 };
    const sum = (a: KernelInput, b: KernelInput) =>
      predictKernel(a, h200).kernelUs + predictKernel(b, h200).kernelUs + 2 * node;
    expect(pdl({ ...matvec, registers: 80 }, none)).toBeCloseTo(sum({ ...matvec, registers: 80 }, none), 9);
    expect(pdl({ ...matvec, registers: 80 }, all)).toBeLessThan(sum({ ...matvec, registers: 80 }, all));
  });

  test("the optimistic and pessimistic ends bracket the working estimate in every mode; the A40 has no graph-pdl", () => {
    const [fast, slow] = (["optimistic", "pessimistic"] as const).map((end) =>
      predictDecodeStep(gpt2, DEFAULT_STEP_FORM, 1023, gpuAt(h200, end), emu.kernels, null),
    );
    for (const m of MODEL_MODES) {
      expect(fast!.modes[m]!).toBeLessThanOrEqual(fused.modes[m]!);
      expect(slow!.modes[m]!).toBeGreaterThanOrEqual(fused.modes[m]!);
    }
    expect(
      predictDecodeStep(gpt2, DEFAULT_STEP_FORM, 1023, GPU_MODELS.a40, emu.kernels, null).modes["graph-pdl"],
    ).toBeNull();
  });
});

describe("storage types and batches (predictions)", () => {
  const at = (batch: number, dtype: DtypeName, context = 1023) =>
    predictDecodeStep(gpt2, { plan: "fused", batch, weights: dtype, kv: dtype }, context, h200, emu.kernels, null);

  test("bf16 weights and cache halve the bytes floor (activations stay fp32) and cut every memory-bound kernel", () => {
    const [f32, bf16] = [at(1, "f32"), at(1, "bf16")];
    expect(bf16.bytesFloorUs / f32.bytesFloorUs).toBeGreaterThan(0.49);
    expect(bf16.bytesFloorUs / f32.bytesFloorUs).toBeLessThan(0.51);
    expect(bf16.modes.graph!).toBeLessThan(f32.modes.graph!);
    const lmHead = (p: typeof f32) => p.kernels.find((k) => k.family === "ln_lm_head_argmax")!;
    expect(lmHead(bf16).bytes / lmHead(f32).bytes).toBeCloseTo(0.5, 2);
  });

  test("a batch reads each weight once: at a short context B = 4 moves about B = 1's bytes and does 4x the FLOPs", () => {
    const [one, four] = [at(1, "f32", 8), at(4, "f32", 8)];
    const flops = (p: typeof one) => p.kernels.reduce((s, k) => s + k.flops, 0);
    expect(four.bytesFloorUs / one.bytesFloorUs).toBeLessThan(1.05);
    expect(flops(four) / flops(one)).toBeCloseTo(4, 6);
    // the matvecs' grids are B = 1's: the rows ride in each thread's accumulators; attention has a block per sequence
    const grids = (p: typeof one, families: string[]) =>
      p.kernels.filter((k) => families.includes(k.family)).map((k) => k.blocks);
    const matvecs = ["ln_qkv", "linear_residual", "ln_linear_gelu"];
    expect(grids(four, matvecs)).toEqual(grids(one, matvecs));
    expect(grids(four, ["attention"])).toEqual(grids(one, ["attention"]).map((b) => 4 * b));
  });
});

describe("inputs read from the code", () => {
  test("launch shapes come from the C launchers: matvecs (OC/32, C/256), attention (splits with keys, heads), the LM head filling the SMs", () => {
    const ops = planShape(gpt2, 1);
    const inputs = kernelInputs(ops, 100, shapesOf(ops), facts, null);
    const by = (label: string) => inputs.find((k) => k.label === label)!;
    expect(by("h0.attn.ln_qkv").blocks).toBe(((3 * 768) / 32) * (768 / 256));
    expect(by("h0.mlp.c_proj").blocks).toBe((768 / 32) * (3072 / 256));
    // attention launches 1024 / 64 splits a head; at context 100 the two that hold its 101 keys work, and the merge
    // reads their partials in one batch
    expect(shapesOf(ops)[ops.findIndex((op) => op.label === "h0.attn.attend")]!).toEqual([
      { grid: [1024 / 64, 12, 1], block: expect.any(Array) },
    ]);
    expect(by("h0.attn.attend").blocks).toBe(2 * 12);
    expect(by("h0.attn.attend").chainL2Trips).toBe(facts.chainL2Trips.attention + 1);
    const at1000 = kernelInputs(ops, 1000, shapesOf(ops), facts, null).find((k) => k.label === "h0.attn.attend")!;
    expect([at1000.blocks, at1000.chainL2Trips]).toEqual([
      16 * 12,
      facts.chainL2Trips.attention + Math.ceil(16 / facts.attention.mergeBatch),
    ]);
    expect(by("ln_f.lm_head.argmax").blocks).toBe(emu.device.smCount * 4);
    expect(inputs.every((k) => k.threads === 256)).toBe(true);
  });

  test("GPT-2 reshaped to 4 K/V heads of 12: ln_qkv's tiles and bytes span c_attn's C + 2 kv_C columns, attention a block per K/V head", () => {
    const ops = planShape(GPT2_FAMILY.withKvHeads(gpt2, 4), 1);
    const inputs = kernelInputs(ops, 100, shapesOf(ops), facts, null);
    const by = (label: string) => inputs.find((k) => k.label === label)!;
    const [C, kvC] = [768, 256],
      OC = C + 2 * kvC;
    expect(by("h0.attn.ln_qkv").blocks).toBe((OC / 32) * (C / 256));
    // fp32: the weight and bias, the layer norm's two vectors, x in and qkv out, a k and a v row to the caches
    expect(by("h0.attn.ln_qkv").bytes).toBe(4 * (C * OC + OC + 2 * C + C + OC + 2 * kvC));
    expect(by("h0.attn.attend").blocks).toBe(2 * 4); // the two splits with context 100's keys, per K/V head
  });

  test("a thread's loads for GPT-2 small's shapes: 8 weight rows per matvec thread, 2 chunks of 4 vocabulary rows, 4 keys and 4 values", () => {
    const loads = Object.fromEntries(planShape(gpt2, 1).map((op) => [op.family, activeLoads(op, facts)]));
    expect(loads).toMatchObject({
      ln_qkv: 8,
      linear_residual: 8,
      ln_linear_gelu: 8,
      ln_lm_head_argmax: 8,
      attention: 8,
    });
    // a bf16 cache: 16-byte loads of 8 halves, 2 keys and 2 values per thread at head size 64
    const bf16 = planShape(gpt2, 1, { ...DEFAULT_STEP_FORM, weights: "bf16", kv: "bf16" });
    expect(activeLoads(bf16.find((op) => op.family === "attention")!, facts)).toBe(4);
  });

  test("without the SASS the model assumes the design's loads; with it, at most what the SASS holds", () => {
    const ops = planShape(gpt2, 1);
    const sass = [
      {
        kernel: "linear_residual_kernel<float, 4, 1>",
        registers: 40,
        wideLoadsInFlight: 2,
        wideLoadsBeforeWait: 0,
        localAccesses: 0,
        waits: true,
        nonCoherentLoads: 0,
        fmaShare: 0.5,
        l2Prefetches: 0,
        scFences: 0,
        sleeps: 0,
      },
    ];
    const [, , , withSass] = kernelInputs(ops, 8, shapesOf(ops), facts, sass);
    expect(withSass).toMatchObject({
      family: "linear_residual",
      loadsInFlight: 2,
      registers: 40,
      prefetches: false,
      fmaShare: 0.5,
    });
    const [, , , without] = kernelInputs(ops, 8, shapesOf(ops), facts, null);
    expect(without).toMatchObject({ loadsInFlight: 8, registers: 64, prefetches: false, fmaShare: 1 });
  });
});

describe("the kernels' facts from the library", () => {
  test("a thread's loads, the chains, the look-aheads and the persistent kernel follow cu_kernel_facts, not copies of them", () => {
    const ops = planShape(gpt2, 1);
    const shapes = shapesOf(ops);
    const at = (f: typeof facts) => kernelInputs(ops, 1023, shapes, f, null).find((k) => k.label === "h0.mlp.c_proj")!;
    const changed = {
      ...facts,
      accessBytes: 32,
      matvec: { ...facts.matvec, loads: 4, tileBytes: 256 },
      chainL2Trips: { ...facts.chainL2Trips, linear_residual: 7 },
    };
    expect([at(facts).loadsInFlight, at(facts).chainL2Trips, at(facts).lookAheadBytes, at(facts).loadBytes]).toEqual([
      8,
      3,
      256 * 128,
      16,
    ]);
    expect([
      at(changed).loadsInFlight,
      at(changed).chainL2Trips,
      at(changed).lookAheadBytes,
      at(changed).loadBytes,
    ]).toEqual([4, 7, 256 * 256, 32]);
    expect(predictKernel(at(changed), h200).chainUs).toBeCloseTo(7 * h200.l2LatencyUs.value, 9);
    const bf16x4 = { plan: "fused", batch: 4, weights: "bf16", kv: "bf16" } as const;
    expect(persistentKernel(gpt2, bf16x4, facts, null)).toEqual({ registers: 255, laterRoundL2Trips: 3 }); // 1 block of 256 per SM
    expect(persistentKernel(gpt2, DEFAULT_STEP_FORM, facts, null)!.registers).toBe(128); // 2 blocks of 256 per SM
    const oneBlock = {
      ...facts,
      persistent: {
        ...facts.persistent,
        minBlocksPerSm: { ...facts.persistent.minBlocksPerSm, f32: [4, 4, 4, 4] },
        laterRoundL2Trips: 5,
      },
    };
    expect(persistentKernel(gpt2, DEFAULT_STEP_FORM, oneBlock, null)).toEqual({ registers: 64, laterRoundL2Trips: 5 });
  });
});

test("Qwen3's q/k norms add the head's arrival to its q/k/v matvec's chain; a Llama without them keeps the merge's", () => {
  const qkvChain = (preset: string, f = facts) => {
    const ops = planShapeOf(ALL_PRESETS[preset]!, 1);
    return kernelInputs(ops, 100, shapesOf(ops), f, null).find((k) => k.family === "rms_qkv_rope")!.chainL2Trips;
  };
  const merge = facts.chainL2Trips.rms_qkv_rope;
  expect(facts.matvec.headNormL2Trips).toBeGreaterThan(0);
  expect(qkvChain("qwen3-0.6b")).toBe(merge + facts.matvec.headNormL2Trips);
  expect(qkvChain("llama-3.2-1b")).toBe(merge);
  expect(qkvChain("qwen3-0.6b", { ...facts, matvec: { ...facts.matvec, headNormL2Trips: 11 } })).toBe(merge + 11);
});

test("an op the library launches more than once (Llama-3.2-1B's LM head at batches 5 and 8) is a kernel per group of rows", () => {
  const llama = ALL_PRESETS["llama-3.2-1b"]!;
  const at = (batch: number) => {
    const form = { plan: "fused", batch, weights: "f32", kv: "f32" } as const;
    const ops = planShapeOf(llama, 1, form);
    return { form, ops, shapes: shapesOf(ops), head: ops.findIndex((op) => op.family === "rms_lm_head_argmax") };
  };
  for (const [batch, rows] of [
    [8, [4, 4]],
    [5, [4, 1]],
  ] as const) {
    const { form, ops, shapes, head } = at(batch);
    // every op once, the LM head once per 4 rows: 2048 floats × 8 rows do not fit its shared memory at once
    expect(shapes.map((s) => s.length)).toEqual(ops.map((_, i) => (i === head ? 2 : 1)));
    const inputs = kernelInputs(ops, 100, shapes, facts, null);
    expect(inputs).toHaveLength(ops.length + 1);
    const label = ops[head]!.label;
    const heads = inputs.filter((k) => k.family === "rms_lm_head_argmax");
    expect(heads.map((k) => k.label)).toEqual([label, `${label} (launch 2)`]);
    // each launch is the op at its rows: the weights once each, its rows' activations and FLOPs
    const alone = (r: number) => at(r).ops[at(r).head]!.work(100);
    heads.forEach((k, i) => {
      expect(k.bytes).toBe(alone(rows[i]!).bytes);
      expect(k.flops).toBe(alone(rows[i]!).flops);
    });
    // and the step predicts: it threw "launch shapes: 83 launches for 82 ops"
    expect(predictDecodeStep(llama, form, 8191, h200, emu.kernels, null).modes.graph!).toBeGreaterThan(0);
  }
});

test("rowGroups: the largest power-of-two groups that make the launches, the last the rest", () => {
  const head = (batch: number) =>
    planShapeOf(ALL_PRESETS["llama-3.2-1b"]!, 1, { plan: "fused", batch, weights: "f32", kv: "f32" }).find(
      (op) => op.family === "rms_lm_head_argmax",
    )!;
  const rowsOf = (batch: number, launches: number) =>
    rowGroups(head(batch), launches).map((op) => namedArgs(op.family, op.args).B);
  expect(rowsOf(8, 2)).toEqual([4, 4]);
  expect(rowsOf(5, 2)).toEqual([4, 1]);
  expect(rowsOf(7, 4)).toEqual([2, 2, 2, 1]);
  expect(rowsOf(3, 3)).toEqual([1, 1, 1]);
  expect(() => rowsOf(3, 5)).toThrow("5 launches for 3 rows");
});

test("predictStep sums what predictKernel gives", () => {
  const step = predictStep([matvec, { ...matvec, label: "n" }], h200);
  expect(step.kernelSumUs).toBeCloseTo(2 * predictKernel(matvec, h200).kernelUs, 9);
});
