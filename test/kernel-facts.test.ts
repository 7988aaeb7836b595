// The kernels' facts the library exports (cu_kernel_facts, src/native/kernel-facts.ts): the same from the emulator's
// library and the CUDA one (one set of sources), and the same geometry the C launchers choose (their launch
// shapes, captured through the emulator). The struct's layout is test/abi-layout.test.ts's.
import { afterAll, describe, expect, test } from "bun:test";

import { CudaBackend } from "../src/backends/cuda.ts";
import { ALL_PRESETS, withKvHeads } from "../src/model/architectures.ts";
import { PRESETS } from "../src/model/gpt2.ts";
import { ensureBuilt, hasNvcc, hasPrebuilt } from "../src/native/build.ts";
import { atBucket, libraryKernelFacts, rowBucket } from "../src/native/kernel-facts.ts";
import { DTYPE_BYTES, MAX_BATCH, OP_FAMILIES } from "../src/ops.ts";
import { encodePlan, type StepForm } from "../src/plan.ts";
import { planShape } from "../src/plan-gpt2.ts";
import { planShapeOf } from "../src/plans.ts";

const emu = CudaBackend.open({ emulated: true });
afterAll(() => emu.close());
const facts = emu.kernels.facts;
const gpt2 = PRESETS.gpt2!;

describe("the kernels' facts", () => {
  test.skipIf(!hasNvcc() && !hasPrebuilt("cuda"))(
    "the CUDA library exports the emulator's facts",
    () => {
      expect(libraryKernelFacts(ensureBuilt("cuda", { quiet: true }).path)).toEqual(facts);
    },
    600_000,
  ); // a stale library is rebuilt first

  test("batch buckets rise to MAX_BATCH; a launch takes the fewest rows that hold its own; every op has its chain", () => {
    expect(facts.batchBuckets.at(-1)).toBe(MAX_BATCH);
    expect([...facts.batchBuckets].sort((a, b) => a - b)).toEqual([...facts.batchBuckets]);
    for (let rows = 1; rows <= MAX_BATCH; rows++) {
      const bucket = rowBucket(facts, rows);
      expect(bucket).toBeGreaterThanOrEqual(rows);
      expect(facts.batchBuckets.filter((b) => b >= rows && b < bucket)).toEqual([]);
    }
    expect(atBucket(facts, [10, 20, 30, 40], 3)).toBe(30);
    for (const family of OP_FAMILIES) expect([family, facts.chainL2Trips[family] >= 0]).toEqual([family, true]);
  });

  test.each([
    ["f32", 1],
    ["bf16", 4],
  ] as const)("the launchers' grids are the facts' geometry (%s weights and cache, batch %d)", (dtype, batch) => {
    const form: StepForm = { plan: "fused", batch, weights: dtype, kv: dtype };
    const ops = planShape(gpt2, 1, form);
    const shapes = emu.launchShapes(encodePlan(ops));
    const shape = (label: string) => shapes[ops.findIndex((op) => op.label === label)]![0]!;
    const C = gpt2.n_embd;
    // a matvec block: one column tile (tileBytes of a row) of one split of C
    const qkv = shape("h0.attn.ln_qkv");
    expect(qkv.grid.slice(0, 2)).toEqual([
      (3 * C) / (facts.matvec.tileBytes / DTYPE_BYTES[dtype]),
      C / facts.matvec.rowsPerSplit,
    ]);
    expect(qkv.block[0]).toBe(facts.matvec.threads);
    // attention: per head and sequence, a block per chunk of keys of every position (GPT-2's 16 fill 12 heads' SMs)
    const attend = shape("h0.attn.attend");
    expect(attend.grid).toEqual([gpt2.n_positions / facts.attention.keysPerChunk, gpt2.n_head, batch]);
    expect(attend.block[0]).toBe(facts.attention.threads);
    // the LM head: at most a block per first rows of its warps, blocks of its threads
    const head = shape("ln_f.lm_head.argmax");
    expect(head.grid[0]).toBeLessThanOrEqual(Math.ceil(gpt2.vocab_size / facts.lmHead.rowsPerBlock));
    expect(head.block[0]).toBe(facts.lmHead.threads);
    expect(facts.lmHead.rowsPerBlock % facts.lmHead.rowsPerWarp).toBe(0);
  });

  test("attention's splits fill the SMs with one row's blocks up to a merge of 2 batches, whatever the batch, at most a split a chunk", () => {
    const llama = ALL_PRESETS["llama-3.2-1b"]!;
    const splitsAt = (positions: number, batch: number, heads: number, kvHeads: number) => {
      const cfg = withKvHeads({ ...llama, n_positions: positions }, kvHeads);
      const ops = planShapeOf({ ...cfg, n_head: heads }, 1, { plan: "fused", batch, weights: "bf16", kv: "bf16" });
      const at = ops.findIndex((op) => op.family === "attention");
      return emu.launchShapes(encodePlan(ops))[at]![0]!.grid;
    };
    const filling = (blocksPerSplit: number) =>
      Math.min(
        facts.attention.maxSplits,
        Math.ceil((emu.device.smCount * facts.attention.blocksPerSm) / blocksPerSplit),
      );
    expect(filling(8)).toBe(32); // 33 would fill 132 SMs; the merge takes at most 2 batches of 16
    expect(splitsAt(32768, 1, 32, 8)).toEqual([filling(8), 8, 1]);
    expect(splitsAt(32768, 4, 32, 8)).toEqual([filling(8), 8, 4]); // each sequence split as alone
    expect(splitsAt(32768, 1, 32, 1)).toEqual([filling(4), 4, 1]); // one K/V head read in passes of 8 query heads
    expect(splitsAt(32768, 1, 32, 32)).toEqual([filling(32), 32, 1]);
    expect(splitsAt(1025, 1, 32, 1)).toEqual([Math.ceil(1025 / facts.attention.keysPerChunk), 4, 1]); // a split a chunk
  });
});
