import { describe, expect, test } from "bun:test";
import { GPT2_FAMILY, kvCacheBytesPerToken, parameterCount, type GPT2Config } from "../src/model/gpt2.ts";

import { decodeStep, type LayerBuffers, type ModelBuffers } from "../src/plan-gpt2.ts";
import { DEFAULT_STEP_FORM, dtypeCodes, PLAN_KINDS, type StepForm } from "../src/plan.ts";
import { attendedKeys, type DtypeName } from "../src/ops.ts";
import {
  cachedStepWork,
  classifyRegime,
  flopReduction,
  opsWork,
  stepWork,
  sumWork,
  uncachedStepWork,
  type OpWork,
} from "../src/profile/work-model.ts";

const UNFUSED: StepForm = { ...DEFAULT_STEP_FORM, plan: "unfused" };

const gpt2: GPT2Config = {
  name: "gpt2",
  n_layer: 12,
  n_head: 12,
  n_embd: 768,
  n_positions: 1024,
  vocab_size: 50257,
  layer_norm_epsilon: 1e-5,
};

const familyFlops = (ops: OpWork[], family: OpWork["family"]) =>
  ops.filter((o) => o.family === family).reduce((s, o) => s + o.flops, 0);

describe("stepWork", () => {
  test("lists the plan in order with layer labels", () => {
    const ops = stepWork(gpt2, 1, 10, UNFUSED);
    expect(ops.length).toBe(1 + 12 * 11 + 3);
    expect(ops[0]!.label).toBe("embed");
    expect(ops.slice(1, 12).map((o) => o.label)).toEqual([
      "h0.ln_1",
      "h0.attn.c_attn",
      "h0.attn.kv_append",
      "h0.attn.attend",
      "h0.attn.c_proj",
      "h0.attn.residual",
      "h0.ln_2",
      "h0.mlp.c_fc",
      "h0.mlp.gelu",
      "h0.mlp.c_proj",
      "h0.mlp.residual",
    ]);
    expect(ops.find((o) => o.label === "h3.attn.c_attn")!.layer).toBe(3);
    expect(ops.slice(-3).map((o) => o.label)).toEqual(["ln_f", "lm_head", "argmax"]);
  });

  test("the fused decode step: five launches per layer, 62 for GPT-2 small; several rows stay unfused", () => {
    const ops = stepWork(gpt2, 1, 10);
    expect(ops.length).toBe(1 + 12 * 5 + 1);
    expect(ops.slice(0, 6).map((o) => o.family)).toEqual([
      "embed",
      "ln_qkv",
      "attention",
      "linear_residual",
      "ln_linear_gelu",
      "linear_residual",
    ]);
    expect(ops.at(-1)!.family).toBe("ln_lm_head_argmax");
    expect(stepWork(gpt2, 2, 0)).toEqual(stepWork(gpt2, 2, 0, UNFUSED));
  });

  test("fusing keeps the FLOPs, the weights and the cache rows, and moves fewer activation bytes", () => {
    const fused = sumWork(stepWork(gpt2, 1, 500)),
      unfused = sumWork(stepWork(gpt2, 1, 500, UNFUSED));
    expect(fused.flops).toBe(unfused.flops);
    expect(fused.weight_bytes).toBe(unfused.weight_bytes);
    expect(fused.kv_bytes).toBe(unfused.kv_bytes);
    expect(fused.bytes).toBeLessThan(unfused.bytes);
  });

  test("is the decode plan's own ops and their work, whatever the buffers", () => {
    const tiny: GPT2Config = { ...gpt2, n_layer: 2, n_embd: 8, n_head: 2, vocab_size: 11, n_positions: 16 };
    const pair = { weight: 1, bias: 1 };
    const layer: LayerBuffers = {
      ln_1: pair,
      c_attn: pair,
      attn_c_proj: pair,
      ln_2: pair,
      c_fc: pair,
      mlp_c_proj: pair,
    };
    const pointers = {
      wte: 1,
      wpe: 1,
      seq: 1,
      next: 1,
      sink: 1,
      state: 1,
      x: 1,
      ln: 1,
      qkv: 1,
      att: 1,
      proj: 1,
      fc: 1,
      act: 1,
      logits: 1,
      scratch: 1,
      partials: 1,
    };
    const buffers: ModelBuffers = {
      config: tiny,
      batch: 1,
      dtypes: dtypeCodes(DEFAULT_STEP_FORM),
      ...pointers,
      layers: [layer, layer],
      ln_f: pair,
      kCache: [1, 1],
      vCache: [1, 1],
      maxRows: 4,
    };
    expect(stepWork(tiny, 3, 5)).toEqual(opsWork(decodeStep(buffers, 3), 5));
    expect(stepWork(tiny, 1, 5)).toEqual(opsWork(decodeStep(buffers, 1), 5));
    expect(stepWork(tiny, 1, 5, UNFUSED)).toEqual(opsWork(decodeStep(buffers, 1, "unfused"), 5));
  });

  test("rejects steps outside the model's positions", () => {
    expect(() => stepWork(gpt2, 1, 1024)).toThrow(RangeError);
    expect(() => stepWork(gpt2, 0, 0)).toThrow(RangeError);
  });

  test("a linear op counts 2 FLOPs per multiply-add plus the bias, and reads its weight once", () => {
    const cFc = stepWork(gpt2, 5, 0).find((o) => o.label === "h0.mlp.c_fc")!;
    expect(cFc.flops).toBe(2 * 5 * 768 * 3072 + 5 * 3072);
    expect(cFc.weight_bytes).toBe(4 * (768 * 3072 + 3072));
    expect(cFc.bytes).toBe(4 * (768 * 3072 + 3072 + 5 * 768 + 5 * 3072));
  });

  test("attention reads every cache row once and attends pos + t + 1 keys per query", () => {
    expect(attendedKeys(1, 1000)).toBe(1001);
    expect(attendedKeys(3, 10)).toBe(11 + 12 + 13);
    const attn = stepWork(gpt2, 1, 1000).find((o) => o.label === "h0.attn.attend")!;
    expect(attn.kv_bytes).toBe(4 * 2 * 1001 * 768);
    expect(attn.flops).toBe(2 * 2 * 768 * 1001 + 5 * 12 * 1001);
  });
});

describe("cached step of GPT-2 small at 1,000 tokens of context", () => {
  const ctx = 1000;
  const total = sumWork(cachedStepWork(gpt2, ctx));

  test("≈ 0.28 GFLOP, matching the hand count of its matmuls", () => {
    // Hand count (multiply-add = 2 FLOPs), the new token at position 1000 attends 1001 keys:
    const blockMatmuls = 2 * (12 * (768 * 2304 + 768 * 768 + 2 * 768 * 3072)); // 169,869,312
    const lmHead = 2 * 768 * 50257; // 77,194,752
    const attention = 2 * 2 * 12 * 768 * (ctx + 1); // QK^T and AV: 36,900,864
    const handCount = blockMatmuls + lmHead + attention; // 283,964,928
    expect(handCount / 1e9).toBeCloseTo(0.284, 3);
    // The rest (biases, layernorms, softmax, gelu, residuals, argmax) adds well under 1%.
    expect(total.flops).toBeGreaterThan(handCount);
    expect(total.flops / handCount - 1).toBeLessThan(0.01);
  });

  test("reads the weights once: every parameter except wpe, plus the one wte row and wpe row embedded", () => {
    const params = parameterCount(gpt2);
    expect(params).toBe(124_439_808);
    const C = 768;
    const expected = 4 * (params - 1024 * C + 2 * C);
    expect(total.weight_bytes).toBe(expected); // 494,619,648 B
    // ≈ the 497.8 MB fp32 checkpoint: within 1% (wpe is the 3.1 MB difference)
    expect(Math.abs(total.weight_bytes / (4 * params) - 1)).toBeLessThan(0.01);
  });

  test("KV bytes are the cache rows read by attention plus the row appended", () => {
    expect(kvCacheBytesPerToken(gpt2)).toBe(2 * 12 * 768 * 4);
    expect(total.kv_bytes).toBe(kvCacheBytesPerToken(gpt2) * (ctx + 1) + kvCacheBytesPerToken(gpt2));
  });
});

describe("uncached vs cached", () => {
  const ctx = 255;
  const T = ctx + 1;
  const cached = cachedStepWork(gpt2, ctx, UNFUSED); // families compared op for op
  const uncached = uncachedStepWork(gpt2, ctx);

  test("recomputes T = context + 1 rows from position 0", () => {
    expect(uncached.find((o) => o.family === "embed")!.flops).toBe(T * 768);
  });

  test("linear FLOPs are exactly T× cached; attention is (T + 1)/2×; the LM head is the same", () => {
    expect(familyFlops(uncached, "linear") / familyFlops(cached, "linear")).toBe(T);
    // uncached keys T(T+1)/2 against cached keys T
    expect(familyFlops(uncached, "attention") / familyFlops(cached, "attention")).toBeCloseTo((T + 1) / 2, 9);
    expect(familyFlops(uncached, "lm_head")).toBe(familyFlops(cached, "lm_head"));
  });

  test("total reduction is below T (LM head once per step) and matches flopReduction", () => {
    const ratio = sumWork(uncached).flops / sumWork(cached).flops;
    expect(flopReduction(gpt2, ctx)).toBe(ratio);
    expect(ratio).toBeLessThan(T);
    expect(ratio).toBeGreaterThan(0.6 * T);
  });

  test("weights are read once either way", () => {
    const wUncached = sumWork(uncached).weight_bytes;
    const wCached = sumWork(cached).weight_bytes;
    // only the embedded rows differ: T rows of wte and wpe vs 1
    expect(wUncached - wCached).toBe(4 * 2 * 768 * (T - 1));
  });
});

describe("classifyRegime", () => {
  const peaks = { flops_per_s: 50e12, bytes_per_s: 4e12 };
  const memoryHeavy = { flops: 1e6, bytes: 40e6, weight_bytes: 40e6, kv_bytes: 0 }; // 10 µs of memory, 0.02 µs of math
  const computeHeavy = { flops: 5e9, bytes: 1e6, weight_bytes: 0, kv_bytes: 0 }; // 100 µs of math

  test("within 2× of the launch floor is launch-bound", () => {
    expect(classifyRegime(7.9, memoryHeavy, peaks, 4)).toBe("launch-bound");
    expect(classifyRegime(8, memoryHeavy, peaks, 4)).toBe("launch-bound");
  });

  test("above it, the dominant roofline term decides", () => {
    expect(classifyRegime(30, memoryHeavy, peaks, 4)).toBe("memory-bound");
    expect(classifyRegime(300, computeHeavy, peaks, 4)).toBe("compute-bound");
  });

  test("a tiny op that runs far above the floor is not called launch-bound", () => {
    const tiny = { flops: 1e3, bytes: 4e3, weight_bytes: 0, kv_bytes: 0 };
    expect(Math.max(tiny.flops / peaks.flops_per_s, tiny.bytes / peaks.bytes_per_s) * 1e6).toBeLessThan(4); // its roofline time is under the floor
    expect(classifyRegime(100, tiny, peaks, 4)).toBe("memory-bound");
  });
});

describe("storage types and batches in the work model", () => {
  const step = (batch: number, weights: DtypeName, kv: DtypeName, context = 500) =>
    sumWork(cachedStepWork(gpt2, context, { plan: "fused", batch, weights, kv }));
  const [f32, bf16, f16] = ["f32", "bf16", "f16"] as const;
  const matrices = 12 * (768 * 3 * 768 + 768 * 768 + 2 * 768 * 3072) + 50257 * 768; // c_attn, c_proj, c_fc, mlp c_proj; wte

  test("bf16 or f16 weights halve the matrices' bytes; biases and norms stay fp32", () => {
    expect(step(1, f32, f32).weight_bytes - step(1, bf16, f32).weight_bytes).toBe(2 * (matrices + 2 * 768)); // + the wte and wpe rows embedded
    expect(step(1, bf16, f32).weight_bytes).toBe(step(1, f16, f32).weight_bytes);
  });

  test("a bf16 cache halves the cache's bytes and nothing else", () => {
    expect(step(1, f32, bf16).kv_bytes * 2).toBe(step(1, f32, f32).kv_bytes);
    expect(step(1, f32, bf16).weight_bytes).toBe(step(1, f32, f32).weight_bytes);
  });

  test("a batch reads every weight matrix once, and each sequence's cache rows and activations", () => {
    const one = step(1, f32, f32),
      four = step(4, f32, f32);
    expect(four.weight_bytes - one.weight_bytes).toBe(3 * 4 * 2 * 768); // only the embedded rows (wte and wpe) are per sequence
    expect(four.kv_bytes).toBe(4 * one.kv_bytes);
    expect(four.flops).toBeCloseTo(4 * one.flops, -3);
  });
});

describe("GPT-2 reshaped to 4 K/V heads of 12 (profile --kv-heads)", () => {
  const gqa = GPT2_FAMILY.withKvHeads(gpt2, 4);
  const [C, kvC, ctx] = [768, 256, 500];

  test.each(PLAN_KINDS)(
    "%s plan: c_attn's k and v columns and the cache rows shrink with the K/V heads, everything else is the same",
    (plan) => {
      const form = { ...DEFAULT_STEP_FORM, plan };
      const mha = cachedStepWork(gpt2, ctx, form),
        grouped = cachedStepWork(gqa, ctx, form);
      expect(grouped.map((o) => o.label)).toEqual(mha.map((o) => o.label));
      const qkv = (ops: OpWork[]) =>
        ops.find((o) => o.label === (plan === "fused" ? "h0.attn.ln_qkv" : "h0.attn.c_attn"))!;
      // c_attn (C, C + 2 kv_C) and its bias: C + 1 parameters per k and v column
      expect(qkv(mha).weight_bytes - qkv(grouped).weight_bytes).toBe(4 * (C + 1) * 2 * (C - kvC));
      expect(qkv(mha).flops - qkv(grouped).flops).toBe((2 * C + 1) * 2 * (C - kvC));
      expect(sumWork(grouped).kv_bytes * 3).toBe(sumWork(mha).kv_bytes);
      const attend = (ops: OpWork[]) => ops.find((o) => o.label === "h0.attn.attend")!;
      expect(attend(grouped).flops).toBe(attend(mha).flops); // every query head still scores every key
      for (const [i, o] of mha.entries())
        if (!/\.attn\.(ln_qkv|c_attn|kv_append|attend)$/.test(o.label)) expect(grouped[i]).toEqual(o);
    },
  );
});
