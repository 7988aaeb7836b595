// The Llama family end to end against its float64 numpy references (../shared/fixtures README says how they were
// checked): logits at every position, and the greedy continuation cached in every launch mode and uncached, on the
// CPU backend and on the CUDA kernels' own source emulated on the CPU; a batch of sequences against each alone;
// a sharded copy of a checkpoint. llama-tiny (GQA 4/2 × 64, tied) and qwen3-tiny (q/k norms, heads × head_dim ≠
// hidden) travel with the project; llama-mini (llama3 rope scaling, untied) and qwen2-tiny (q/k/v biases, MQA 7/1)
// are read from ../shared/fixtures where it is present.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { CpuBackend } from "../src/backends/cpu.ts";
import { CudaBackend } from "../src/backends/cuda.ts";
import { loadAnyModel } from "../src/model/architectures.ts";
import { generate, generateBatch } from "../src/run/generate.ts";
import { DTYPE_NAMES } from "../src/ops.ts";
import { PLAN_KINDS } from "../src/plan.ts";
import { launchMode } from "../src/run/launch-modes.ts";
import { Session } from "../src/run/session.ts";
import { checkpointTensors, shardedDir } from "./helpers/model-files.ts";
import {
  cachedEqualsUncached,
  fixtureChecks,
  modesBitIdentical,
  plansAgree,
  readFixture,
} from "../src/verify/model-checks.ts";

const HERE = join(import.meta.dir, "fixtures");
const SHARED = join(import.meta.dir, "../../shared/fixtures");
const FIXTURES = [
  { name: "llama-tiny", dir: join(HERE, "llama-tiny") },
  { name: "qwen3-tiny", dir: join(HERE, "qwen3-tiny") },
  { name: "llama-mini", dir: join(SHARED, "llama-mini") },
  { name: "qwen2-tiny", dir: join(SHARED, "qwen2-tiny") },
];
const present = FIXTURES.filter((f) => existsSync(join(f.dir, "config.json")));
for (const f of FIXTURES.filter((f) => !present.includes(f)))
  console.log(`model-llama: skipping ${f.name}: ${f.dir} is not here (../shared/fixtures is absent)`);

/** The emulator runs every CUDA thread as a fiber: tens of seconds per model, several times that on busy cores. */
const EMU_TIMEOUT_MS = 600_000;
const cpu = CpuBackend.open();
const emu = CudaBackend.open({ emulated: true });
afterAll(() => {
  cpu.close();
  emu.close();
});

describe.each(present.map((f) => [f.name, f] as const))("%s against its float64 reference", (_, f) => {
  const fixture = readFixture(f.dir);
  const weights = loadAnyModel(f.dir);
  const cases = [
    ["cpu", cpu],
    ["emulated CUDA", emu],
  ] as const;
  test.each(cases.flatMap(([name, backend]) => PLAN_KINDS.map((plan) => [name, plan, backend] as const)))(
    "on %s, %s plan: logits, and greedy tokens in every mode, cached and uncached",
    (name, plan, backend) => {
      const rows = fixtureChecks(backend, weights, fixture, plan);
      expect(rows.filter((r) => r.status !== "pass")).toEqual([]);
      // logits, a greedy row per launch mode the backend has (the persistent step: the fused plan's), uncached
      const modes = name === "cpu" ? 2 : plan === "fused" ? 5 : 4;
      expect(rows).toHaveLength(modes + 2);
    },
    EMU_TIMEOUT_MS,
  );
});

describe("llama-tiny's fused plan on the emulated CUDA kernels", () => {
  const dir = join(HERE, "llama-tiny");
  const weights = loadAnyModel(dir);
  const { prompt } = readFixture(dir);
  const n = weights.config.n_positions - prompt.length; // every position the cache holds
  test(
    "every launch mode bit for bit (the persistent step too), the cache exact, the plans agreeing, over every position",
    () => {
      for (const check of [
        modesBitIdentical(emu, weights, prompt, n, "fused"),
        cachedEqualsUncached(emu, weights, prompt, n, "fused"),
        plansAgree(emu, weights, prompt, n),
      ])
        expect(`${check.check} ${check.detail}: ${check.status}`).toEndWith(": pass");
      expect(modesBitIdentical(emu, weights, prompt, 4, "fused").detail).toContain("persistent");
    },
    EMU_TIMEOUT_MS,
  );
});

describe("batches and checkpoints", () => {
  const dir = join(HERE, "llama-tiny");
  const fixture = readFixture(dir);
  test.each([
    ["cpu", cpu],
    ["emulated CUDA", emu],
  ] as const)(
    "on %s, a batch of 3 sequences gives each its tokens alone, in both plans and every storage type",
    (_, backend) => {
      const weights = loadAnyModel(dir);
      const prompts = [fixture.prompt, fixture.prompt.slice(2), [7, 8, 9, 10]];
      for (const [plan, dtype] of PLAN_KINDS.flatMap((p) => DTYPE_NAMES.map((d) => [p, d] as const))) {
        const form = { plan, batch: 1, weights: dtype, kv: dtype };
        const alone = prompts.map((prompt) => {
          const s = new Session(backend, weights, { form });
          try {
            return generate(s, { prompt, maxNewTokens: 6, cache: true, mode: launchMode("eager") }).generatedIds;
          } finally {
            s.close();
          }
        });
        const s = new Session(backend, weights, { form: { ...form, batch: prompts.length } });
        try {
          const together = generateBatch(s, { prompts, maxNewTokens: 6, cache: true, mode: launchMode("eager") });
          expect(together.generatedIds).toEqual(alone);
        } finally {
          s.close();
        }
      }
    },
  );

  test("a sharded copy (index + two shards) gives the same tokens; a missing shard is one line", () => {
    const base = mkdtempSync(join(tmpdir(), "llama-sharded-"));
    try {
      const tensors = checkpointTensors(join(dir, "model.safetensors"));
      const names = tensors.map((t) => t.name);
      const half = Math.ceil(names.length / 2);
      const copy = shardedDir(base, join(dir, "config.json"), tensors, [names.slice(0, half), names.slice(half)]);
      const s = new Session(cpu, loadAnyModel(copy), {
        form: { plan: "unfused", batch: 1, weights: "f32", kv: "f32" },
      });
      try {
        const ids = generate(s, {
          prompt: fixture.prompt,
          maxNewTokens: fixture.generated.length,
          cache: true,
          mode: launchMode("eager"),
        }).generatedIds;
        expect(ids).toEqual(fixture.generated);
      } finally {
        s.close();
      }
      rmSync(join(copy, "model-00002-of-00002.safetensors"));
      expect(() => loadAnyModel(copy)).toThrow(/shard model-00002-of-00002\.safetensors .* is missing/);
    } finally {
      rmSync(base, { recursive: true, force: true });
    }
  });
});
