// `bun run profile` end to end on the CPU backend: every output file, validated; every op traced and the
// step's split consistent by construction; one clear line for every bad flag; a clean stop on a signal.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { freemem, tmpdir } from "node:os";
import { join } from "node:path";

import { XMLValidator } from "fast-xml-parser";

import type { GPT2Config } from "../src/model/gpt2.ts";
import { probeDriver } from "../src/native/driver.ts";
import type { DtypeName } from "../src/ops.ts";
import { SCHEMA_VERSION, type ProfileSummary } from "../src/profile/types.ts";
import { OPTIONAL_FILES, OUTPUT_FILES } from "../src/report/output-files.ts";
import { validateSummary } from "../src/report/schema.ts";
import { validateTrace } from "../src/report/trace.ts";
import { encode, hfConfigJson, modelDir, seededTensors } from "./helpers/model-files.ts";
import { ROOT, runCli } from "./helpers/cli.ts";

const FIXTURE = join(import.meta.dir, "fixtures/gpt2-tiny");
const LLAMA_FIXTURE = join(import.meta.dir, "fixtures/llama-tiny");
const out = mkdtempSync(join(tmpdir(), "profile-"));
afterAll(() => rmSync(out, { recursive: true, force: true }));

const profile = (...args: string[]) => runCli("profile", args);

describe("profile --backend cpu on gpt2-tiny", () => {
  const dir = join(out, "tiny");
  let run: ReturnType<typeof profile>;
  let summary: ProfileSummary;
  beforeAll(() => {
    run = profile(
      "--backend",
      "cpu",
      "--model",
      FIXTURE,
      "--contexts",
      "8,32,63",
      "--repeats",
      "5",
      "--out",
      dir,
      "--json",
    );
    summary = JSON.parse(run.stdout) as ProfileSummary;
  });

  test("exits 0 and prints only the summary JSON on stdout", () => {
    expect(run.code).toBe(0);
    expect(summary.schema_version).toBe(SCHEMA_VERSION);
    expect(summary.settings.plan).toBe("fused");
  });

  test("writes every file; summary.json matches its schema and equals stdout", () => {
    for (const name of Object.values(OUTPUT_FILES)) expect(Bun.file(join(dir, name)).size).toBeGreaterThan(0);
    const written = JSON.parse(readFileSync(join(dir, OUTPUT_FILES.summary), "utf8"));
    expect(validateSummary(written)).toEqual([]);
    expect(written).toEqual(summary);
    // the folder gets what mkdir would give it, not the 0700 of the temporary folder it was written in
    expect(statSync(dir).mode & 0o777).toBe(0o777 & ~process.umask());
  });

  test("trace.json is a valid Chrome trace with a host and a device track per mode", () => {
    const trace = JSON.parse(readFileSync(join(dir, OUTPUT_FILES.trace), "utf8"));
    expect(validateTrace(trace)).toEqual([]);
    const names = trace.traceEvents
      .filter((e: { ph: string; name: string }) => e.ph === "M")
      .map((e: { args: { name: string } }) => e.args.name);
    expect(names.join(" ")).toMatch(/eager/);
    expect(trace.traceEvents.filter((e: { ph: string }) => e.ph === "X").length).toBeGreaterThan(100);
  });

  test("the SVG plots are well-formed XML", () => {
    for (const name of [OUTPUT_FILES.latency, OUTPUT_FILES.breakdown, OUTPUT_FILES.traffic]) {
      expect(XMLValidator.validate(readFileSync(join(dir, name), "utf8"))).toBe(true);
    }
  });

  test("every mode and the uncached baseline at every context, with a breakdown and a verdict", () => {
    expect(summary.settings.modes).toEqual(["uncached", "eager", "eager-native"]);
    expect(summary.points).toHaveLength(9);
    for (const p of summary.points) {
      expect(p.device_ms.median).toBeGreaterThan(0);
      // the cached steps run the fused plan (the default), the uncached baseline the one-op-per-launch plan
      expect(p.breakdown!.families.map((f) => f.key)).toContain(p.mode === "uncached" ? "linear" : "linear_residual");
      expect(p.split!.verdict.length).toBeGreaterThan(0);
    }
    expect(summary.seed_table.map((r) => r.context)).toEqual([8, 32, 63]);
    expect(summary.end_to_end.map((e) => e.mode)).toEqual(["uncached", "eager", "eager-native"]);
    for (const e of summary.end_to_end) {
      // the first token's time and the rest's mean make up the total
      expect(e.ttft_ms).toBeGreaterThan(0);
      expect(e.ttft_ms).toBeLessThan(e.total_ms);
      expect(e.ttft_ms + e.tpot_ms! * (e.new_tokens - 1)).toBeCloseTo(e.total_ms, 9);
    }
    expect(summary.verdicts.some((v) => v.startsWith("Is the floor launch overhead?"))).toBe(true);
    // the launch floor is measured with empty ops and set against the step (the fused step: 12 ops for 2 layers)
    expect(summary.device.launch.host_us).toBeGreaterThan(0);
    expect(summary.verdicts.some((v) => v.startsWith("Launch floor at context 63: 12 ops ×"))).toBe(true);
  });

  test("a verdict says how far the uncached baseline is from the measured fp32 peak", () => {
    const p = summary.points.find((q) => q.mode === "uncached" && q.context === 63)!;
    const share = `${Math.round(100 * p.achieved.flops_share)}% of the measured fp32 peak`;
    const verdict = summary.verdicts.find((v) => v.startsWith("The uncached baseline at context 63 achieves"));
    expect(verdict).toContain(`${(p.achieved.flops_per_s / 1e9).toFixed(1)} GFLOP/s, ${share}`);
    expect(verdict).toContain(`(${(summary.device.peaks.flops_per_s / 1e9).toFixed(1)} GFLOP/s)`);
  });

  test("KV cache memory: measured per token equals the formula (2 × n_layer × n_embd × 4), to the byte", () => {
    // the CPU backend counts the resident pages of its own allocations (mincore), so nothing else in the
    // process (the JS heap, which its own threads grow and shrink) moves the measurement
    const m = summary.memory;
    expect(m.kv_bytes_per_token_formula).toBe(2 * 2 * 128 * 4);
    expect(m.kv_bytes_per_token_measured).toBe(m.kv_bytes_per_token_formula);
  });

  test("the terminal report without --json is plain text under NO_COLOR", () => {
    const r = profile(
      "--backend",
      "cpu",
      "--model",
      FIXTURE,
      "--contexts",
      "8",
      "--repeats",
      "2",
      "--e2e-tokens",
      "4",
      "--out",
      join(out, "plain"),
    );
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("Time per token");
    expect(r.stdout).not.toMatch(/\x1b\[/);
  });
});

// Structure only: no relation between two measured times is asserted (on a shared machine any of them can
// stretch), only what holds by construction: every op of every traced step is timed, busy + idle = step, and
// the per-step op time cannot exceed the step it lies inside (the ops run one after another within the step's
// window, and with an odd number of traced steps both figures are order statistics of the same steps).
// A narrow model with GPT-2 small's 12 layers (62 ops per fused cached step, 136 per unfused uncached one)
// keeps this quick on busy cores.
test("12 layers on the CPU: every op traced, busy + idle = step, op time within the step", () => {
  const config: GPT2Config = {
    name: "narrow12",
    n_layer: 12,
    n_head: 2,
    n_embd: 32,
    n_positions: 32,
    vocab_size: 97,
    layer_norm_epsilon: 1e-5,
  };
  const model = modelDir(out, { config: hfConfigJson(config), model: encode(seededTensors(config)).bytes });
  const dir = join(out, "narrow12");
  const tracedSteps = 3;
  const r = profile(
    "--backend",
    "cpu",
    "--model",
    model,
    "--contexts",
    "8",
    "--repeats",
    "3",
    "--warmup",
    "1",
    "--traced-steps",
    String(tracedSteps),
    "--e2e-tokens",
    "4",
    "--out",
    dir,
    "--json",
  );
  expect(r.code).toBe(0);
  const points = (JSON.parse(r.stdout) as ProfileSummary).points;
  expect(points.map((p) => p.mode)).toEqual(["eager", "eager-native", "uncached"]);
  for (const p of points) {
    // the cached steps: embed, 5 fused ops per block, the fused LM head; uncached: embed, 11 per block, ln_f, lm_head, argmax
    const perBlock = p.mode === "uncached" ? 11 : 5;
    const opsPerStep = p.mode === "uncached" ? 1 + 12 * perBlock + 3 : 1 + 12 * perBlock + 1;
    const split = p.split!;
    expect(p.breakdown!.families.reduce((n, f) => n + f.calls, 0)).toBe(opsPerStep * tracedSteps);
    expect(p.breakdown!.layers.find((l) => l.key === "h11")!.calls).toBe(perBlock * tracedSteps);
    expect(split.busy_ms + split.idle_ms).toBeCloseTo(split.step_ms, 9);
    expect(split.busy_ms).toBeGreaterThan(0);
    expect(split.busy_ms).toBeLessThanOrEqual(split.step_ms);
    expect(p.breakdown!.op_sum_ms).toBeLessThanOrEqual(split.step_ms * (1 + 1e-12));
  }
}, 300_000);

// The interventions: every storage type × batch at every context, interleaved with the study's own
// configuration, and an attribution sentence drawn from them.
test("--dtypes f32,bf16 --batches 1,2: every configuration at every context, the schema, the table and the attribution", () => {
  const dir = join(out, "interventions");
  const r = profile(
    "--backend",
    "cpu",
    "--model",
    FIXTURE,
    "--contexts",
    "8,16",
    "--repeats",
    "2",
    "--warmup",
    "1",
    "--e2e-tokens",
    "4",
    "--no-kernels",
    "--dtypes",
    "f32,bf16",
    "--batches",
    "1,2",
    "--out",
    dir,
    "--json",
  );
  expect(r.code).toBe(0);
  const s = JSON.parse(r.stdout) as ProfileSummary;
  expect(validateSummary(s)).toEqual([]);
  expect([s.settings.dtype, s.settings.kv_dtype, s.model.dtype]).toEqual(["f32", "f32", "f32"]);
  const iv = s.interventions!;
  expect(iv.mode).toBe("eager-native");
  const config = (dtype: DtypeName, batch: number) => ({ dtype, kv_dtype: dtype, batch, kv_heads: 2 });
  expect(iv.configs).toEqual([config("f32", 1), config("f32", 2), config("bf16", 1), config("bf16", 2)]);
  expect(iv.points.map((p) => [p.dtype, p.batch, p.context])).toEqual(
    [8, 16].flatMap((c) => [
      ["f32", 1, c],
      ["f32", 2, c],
      ["bf16", 1, c],
      ["bf16", 2, c],
    ]),
  );
  for (const p of iv.points) {
    expect(p.token_ms).toBeCloseTo(p.step_ms.median / p.batch, 12);
    expect(p.bytes_per_token).toBeCloseTo(p.work.bytes / p.batch, 6);
  }
  const at = (dtype: string, batch: number) =>
    iv.points.find((p) => p.context === 16 && p.dtype === dtype && p.batch === batch)!;
  // the work model: bf16 moves fewer bytes; a batch of two reads the weights once, so fewer bytes per token
  expect(at("bf16", 1).work.bytes).toBeLessThan(at("f32", 1).work.bytes);
  expect(at("f32", 2).bytes_per_token).toBeLessThan(at("f32", 1).bytes_per_token);
  const a = iv.attribution;
  expect([a.context, a.bytes!.from, a.bytes!.to, a.batch!.batch]).toEqual([16, "f32", "bf16", 2]);
  expect(a.bytes!.bytes_ratio).toBeCloseTo(at("f32", 1).work.bytes / at("bf16", 1).work.bytes, 12);
  // the launch mode: eager against the other cached mode (eager-native on the CPU), whichever was faster; a tiny
  // model's steps are below the read probe's knee, so unpaired, and compared as measured
  const point = (mode: string) => s.points.find((p) => p.context === 16 && p.mode === mode)!;
  expect([point("eager").read_bytes_per_s, point("eager-native").read_bytes_per_s]).toEqual([null, null]);
  expect([a.launch!.mode, a.launch!.eager_ms, a.launch!.mode_ms]).toEqual([
    "eager-native",
    point("eager").device_ms.median,
    point("eager-native").device_ms.median,
  ]);
  expect(a.launch!.change).toBeCloseTo(1 - a.launch!.mode_ms / a.launch!.eager_ms, 12);
  expect(a.verdict).toContain("eager-native instead of eager");
  expect(s.verdicts).toContain(a.verdict);
  expect(readFileSync(join(dir, OUTPUT_FILES.report), "utf8")).toContain("## Interventions: the bytes and the batch");
}, 300_000);

/** A short untraced CPU profile of llama-tiny into `dir`, its summary on stdout. */
const quickLlamaProfile = (dir: string, ...flags: string[]) =>
  profile(
    ...["--backend", "cpu", "--model", LLAMA_FIXTURE, "--repeats", "2", "--e2e-tokens", "4", "--no-kernels"],
    ...["--out", dir, "--json", ...flags],
  );

describe("profile --fill synthetic on llama-tiny", () => {
  const dir = join(out, "fill");
  let run: ReturnType<typeof profile>;
  let summary: ProfileSummary;
  beforeAll(() => {
    run = quickLlamaProfile(dir, "--contexts", "8,100", "--fill", "synthetic");
    summary = JSON.parse(run.stdout) as ProfileSummary;
  });

  test("memory: the cache holds its formula's bytes for the positions written, to the page; the run's fit", () => {
    const m = summary.memory;
    const cfg = summary.model.config as { n_layer: number };
    const PAGE = 4096;
    expect(m.resident_source).toContain("mincore");
    expect(m.by_context.map((r) => r.context)).toEqual([8, 100]);
    for (const r of m.by_context) {
      expect(r.kv_positions).toBeGreaterThanOrEqual(r.context + 1);
      expect(r.kv_bytes_formula).toBe(r.kv_positions * m.kv_bytes_per_token_formula);
      // every written row's page is held; at most each layer's K and V segment ends mid-page
      expect(r.kv_bytes_resident).toBeGreaterThanOrEqual(r.kv_bytes_formula);
      expect(r.kv_bytes_resident).toBeLessThanOrEqual(r.kv_bytes_formula + 2 * cfg.n_layer * PAGE);
      expect(r.regions.find((g) => g.name === "cache")!.resident_bytes).toBe(r.kv_bytes_resident);
      // a region of the activations may start and end mid-page: its pages count whole
      for (const g of r.regions) expect(g.resident_bytes).toBeLessThanOrEqual(g.allocated_bytes + 2 * PAGE);
      expect(r.regions.map((g) => g.name)).toEqual(expect.arrayContaining(["weights", "cache", "scratch", "seq"]));
    }
    expect(m.by_context[1]!.kv_positions).toBe(101);
    // a tiny model fits to its limit, and what it held at once is what its session and memory measurement allocate
    expect(m.fit.largest_context).toBe(summary.model.config.n_positions - 1);
    // the read passes' buffer stays beside the sessions all study: its share is not theirs
    expect(m.fit.free_source).toBe(
      "host memory available (MemAvailable) less the 1/16 the read passes' buffer may take",
    );
    expect(m.fit.need.weights).toBe(m.by_context[0]!.regions.find((g) => g.name === "weights")!.allocated_bytes);
    expect(readFileSync(join(dir, OUTPUT_FILES.report), "utf8")).toContain("What the study's session held");
  });

  test("each context says its fill; the one within the real prefix was prefilled", () => {
    expect(run.code).toBe(0);
    expect(validateSummary(summary)).toEqual([]);
    expect(summary.settings.fill).toBe("synthetic");
    expect(summary.settings.prefill_flops_per_s).toBeGreaterThan(0);
    expect(summary.seed_table.map((r) => [r.context, r.fill])).toEqual([
      [8, "prefill"],
      [100, "synthetic"],
    ]);
    // a tiny model's uncached step takes milliseconds: timed at both
    for (const r of summary.seed_table) expect([r.uncached_ms! > 0, r.uncached_model_ms]).toEqual([true, null]);
    expect(readFileSync(join(dir, OUTPUT_FILES.report), "utf8")).toContain(
      "At context 100 the cache was filled synthetically",
    );
  });
});

describe("profile --kv-heads 4,2,1 --batches 1,2 on llama-tiny (4 query heads, 2 K/V heads)", () => {
  const dir = join(out, "kv-heads");
  let run: ReturnType<typeof profile>;
  let summary: ProfileSummary;
  beforeAll(() => {
    run = quickLlamaProfile(dir, "--contexts", "8,32", "--kv-heads", "1,4,2", "--batches", "1,2", "--warmup", "1");
    summary = JSON.parse(run.stdout) as ProfileSummary;
  });

  test("every variant × batch at every context, the bytes of each variant's own shape", () => {
    expect(run.code).toBe(0);
    expect(validateSummary(summary)).toEqual([]);
    const iv = summary.interventions!;
    expect(iv.configs.map((c) => [c.kv_heads, c.batch])).toEqual([
      [4, 1],
      [4, 2],
      [2, 1],
      [2, 2],
      [1, 1],
      [1, 2],
    ]);
    expect(iv.points).toHaveLength(12);
    const at = (kv: number, batch: number, context: number) =>
      iv.points.find((p) => p.kv_heads === kv && p.batch === batch && p.context === context)!;
    // K/V bytes: 2 layers × 2 (K, V) × kv_heads × 64 × 4 B per row: at context 32, 33 rows read and the new one written
    for (const kv of [4, 2, 1]) expect(at(kv, 1, 32).work.kv_bytes).toBe(34 * 2 * 2 * kv * 64 * 4);
    expect(at(1, 2, 32).work.kv_bytes).toBe(2 * at(1, 1, 32).work.kv_bytes);
    expect(at(4, 1, 8).work.weight_bytes).toBeGreaterThan(at(1, 1, 8).work.weight_bytes);
  });

  test("the saving against 4 K/V heads and each crossover, measured beside the bytes", () => {
    const k = summary.interventions!.kv_heads!;
    expect(k.variants).toEqual([4, 2, 1]);
    expect(k.timed_together).toBe(true);
    expect(k.savings.map((s) => [s.kv_heads, s.batch, s.context, s.reference_kv_heads])).toEqual([
      [2, 1, 32, 4],
      [2, 2, 32, 4],
      [1, 1, 32, 4],
      [1, 2, 32, 4],
    ]);
    const at = (kv: number, batch: number) =>
      summary.interventions!.points.find((p) => p.kv_heads === kv && p.batch === batch && p.context === 32)!;
    for (const s of k.savings) {
      expect(s.formula_saved).toBeCloseTo(1 - at(s.kv_heads, s.batch).work.bytes / at(4, s.batch).work.bytes, 12);
      expect(s.saved).toBeCloseTo(1 - at(s.kv_heads, s.batch).step_ms.median / at(4, s.batch).step_ms.median, 12);
    }
    expect(k.crossovers).toHaveLength(6);
    for (const c of k.crossovers) {
      const p = at(c.kv_heads, c.batch);
      expect(c.formula_context).toBeCloseTo(((32 + 2) * p.work.weight_bytes) / p.work.kv_bytes, 6); // a step at 32 moves 34 rows
      expect(c.within_run).toBe(c.formula_context <= 32);
    }
    expect(
      summary.verdicts.some((v) =>
        v.startsWith("K/V heads at context 32 (batch 1, weights f32, cache f32): against 4 K/V heads"),
      ),
    ).toBe(true);
    expect(readFileSync(join(dir, OUTPUT_FILES.report), "utf8")).toContain(
      "## Grouped-query attention: the K/V heads' saving",
    );
  });

  test("kv-heads.svg: a line per variant × batch, each crossover marked or listed beyond the run", () => {
    const svg = readFileSync(join(dir, OPTIONAL_FILES.kvHeads), "utf8");
    expect(XMLValidator.validate(svg)).toBe(true);
    expect(readFileSync(join(dir, "report.md"), "utf8")).toMatch(
      /^- .*\[kv-heads\.svg\]\(kv-heads\.svg\).*: the plots$/m,
    );
    expect(svg.match(/<g class="series">/g)).toHaveLength(6);
    for (const c of summary.interventions!.kv_heads!.crossovers) {
      const short = `${c.kv_heads}h b${c.batch} `;
      if (c.measured_context !== null || c.within_run) expect(svg).toContain(`>${short}`);
      if (!c.within_run) expect(svg).toMatch(new RegExp(`beyond the run, by the bytes: .*${short}`));
    }
  });
});

test("--kv-heads 1,2 on gpt2-tiny (2 query heads): its own weights at 2, seeded MQA weights at 1, each shape's bytes", () => {
  const dir = join(out, "gpt2-kv-heads");
  const r = profile(
    ...["--backend", "cpu", "--model", FIXTURE, "--contexts", "8,16", "--repeats", "2", "--warmup", "1"],
    ...["--e2e-tokens", "4", "--no-kernels", "--kv-heads", "1,2", "--out", dir, "--json"],
  );
  expect(r.code).toBe(0);
  const s = JSON.parse(r.stdout) as ProfileSummary;
  expect(validateSummary(s)).toEqual([]);
  const iv = s.interventions!;
  expect(iv.configs.map((c) => c.kv_heads)).toEqual([2, 1]);
  expect(iv.kv_heads!.variants).toEqual([2, 1]);
  const at = (kv: number) => iv.points.find((p) => p.kv_heads === kv && p.context === 16)!;
  // K/V bytes: 2 layers × 2 (K, V) × kv_heads × 64 × 4 B per row: at context 16, 17 rows read and the new one written
  for (const kv of [2, 1]) expect(at(kv).work.kv_bytes).toBe(18 * 2 * 2 * kv * 64 * 4);
  // each layer's c_attn: C + 1 = 129 weights and bias fewer per k and v column dropped
  expect(at(2).work.weight_bytes - at(1).work.weight_bytes).toBe(2 * 129 * 2 * 64 * 4);
}, 300_000);

test("one configuration asked for that is not the study's own is timed: --batches 2 alone, --kv-heads 1 alone", () => {
  const ownOnlyNote = /^note: .*name only the study's own configuration/m;
  const only = (name: string, ...flags: string[]) => {
    const run = quickLlamaProfile(join(out, name), "--mode", "eager", ...flags);
    expect(run.code).toBe(0);
    const report = readFileSync(join(out, name, OUTPUT_FILES.report), "utf8");
    return { interventions: (JSON.parse(run.stdout) as ProfileSummary).interventions, stderr: run.stderr, report };
  };
  const batch2 = only("batch-2-only", "--contexts", "8,100", "--fill", "synthetic", "--batches", "2");
  const kv1 = only("kv-1-only", "--contexts", "8", "--kv-heads", "1");
  const timedAlone: Array<[typeof batch2, number[][]]> = [
    [batch2, [8, 100].map((context) => [2, 2, context])],
    [kv1, [[1, 1, 8]]],
  ];
  for (const [{ interventions, stderr }, timed] of timedAlone) {
    expect(interventions!.points.map((p) => [p.batch, p.kv_heads, p.context])).toEqual(timed);
    expect(stderr).not.toMatch(ownOnlyNote);
  }
  // each point filled as the study's at its context, and the table says how where any was synthetic
  expect(batch2.interventions!.points.map((p) => p.fill)).toEqual(["prefill", "synthetic"]);
  expect(batch2.report).toMatch(/\| context \(tokens\) \| fill \|/);
  expect(kv1.report).not.toMatch(/\| fill \|/);
  // the study's own alone: nothing beside it to time, and the run says so
  const own = only("own-only", "--contexts", "8", "--kv-heads", "2", "--batches", "1");
  expect(own.interventions).toBeUndefined();
  expect(own.stderr).toMatch(
    /^note: --batches 1 --kv-heads 2 name only the study's own configuration \(f32, batch 1, 2 K\/V heads\): no interventions are timed beside it$/m,
  );
}, 300_000);

test("--dtypes bf16,f32 (the study's own the fewest bytes): the attribution weighs f32 against it", () => {
  const run = quickLlamaProfile(join(out, "bf16-first"), "--contexts", "8", "--mode", "eager", "--dtypes", "bf16,f32");
  expect(run.code).toBe(0);
  const iv = (JSON.parse(run.stdout) as ProfileSummary).interventions!;
  const at = (dtype: string) => iv.points.find((p) => p.dtype === dtype && p.batch === 1)!;
  const bytes = iv.attribution.bytes!;
  expect([bytes.from, bytes.to]).toEqual(["f32", "bf16"]);
  expect(bytes.bytes_ratio).toBeCloseTo(at("f32").work.bytes / at("bf16").work.bytes, 12);
  expect(bytes.time_ratio).toBeCloseTo(at("f32").step_ms.median / at("bf16").step_ms.median, 12);
  expect(iv.attribution.verdict).toMatch(/^Attribution at context 8: bf16 (halved|cut by [\d.]+×) the bytes per step/);
}, 300_000);

describe("profile --prompt-cache on llama-tiny", () => {
  const dir = join(out, "prompt-cache");
  let run: ReturnType<typeof profile>;
  let summary: ProfileSummary;
  beforeAll(() => {
    run = quickLlamaProfile(dir, "--contexts", "8", "--mode", "eager", "--prompt-cache", "100,16");
    summary = JSON.parse(run.stdout) as ProfileSummary;
  });

  test("cold and warm first tokens per prefix, the bytes kept, the same tokens after each", () => {
    expect(run.code).toBe(0);
    expect(validateSummary(summary)).toEqual([]);
    const c = summary.prompt_cache!;
    expect(c.suffix_tokens).toBe(16);
    expect(c.points.map((p) => p.prefix_tokens)).toEqual([16, 100]);
    for (const p of c.points) {
      // 2 layers × K and V × P rows × 2 K/V heads × 64 × 4 bytes, and the file's header before them
      expect(p.bytes_kept).toBe(2 * 2 * p.prefix_tokens * 128 * 4);
      expect(p.file_bytes).toBeGreaterThan(p.bytes_kept);
      for (const t of [p.cold_ttft_ms, p.warm_memory_ttft_ms, p.warm_file_ttft_ms]) {
        expect(t.n).toBe(c.repeats);
        expect(t.median).toBeGreaterThan(0);
      }
      expect(p.streams_identical).toBe(true);
    }
    expect(summary.verdicts.some((v) => v.startsWith("Prompt caching: with a 100-token prefix kept"))).toBe(true);
    expect(readFileSync(join(dir, OUTPUT_FILES.report), "utf8")).toContain(
      "## Prompt caching: time to first token, cold and with a kept prefix",
    );
    const svg = readFileSync(join(dir, OPTIONAL_FILES.promptCache), "utf8");
    expect(XMLValidator.validate(svg)).toBe(true);
    expect(svg.match(/<circle /g)).toHaveLength(3 * c.points.length);
  });
});

describe("bad flags: one line, exit ≠ 0", () => {
  test.each([
    [
      "a prompt-cache prefix beyond the positions",
      ["--model", LLAMA_FIXTURE, "--backend", "cpu", "--prompt-cache", "64,105"],
      /^error: --prompt-cache: a 105-token prefix does not fit: .* it needs 129 positions, and the model has max_position_embeddings 128 \(longest prefix 104\)$/,
    ],
    [
      "a prompt-cache prefix that is not a number",
      ["--model", LLAMA_FIXTURE, "--backend", "cpu", "--prompt-cache", "1k"],
      /--prompt-cache: "1k" is not a positive integer/,
    ],
    ["an unknown mode", ["--mode", "turbo"], /turbo/],
    ["an unknown flag", ["--bogus"], /bogus/],
    [
      "an impossible context",
      ["--model", FIXTURE, "--backend", "cpu", "--contexts", "8,64"],
      /64.*impossible|impossible.*64/,
    ],
    ["a context that is not a number", ["--model", FIXTURE, "--backend", "cpu", "--contexts", "8,x"], /"x"/],
    [
      "graph on the CPU backend",
      ["--backend", "cpu", "--mode", "graph"],
      /^error: launch mode graph is not available on the cpu backend: it has no CUDA graphs \(a GPU's\) \(available: eager, eager-native, all\)$/,
    ],
    [
      "an unknown storage type",
      ["--model", FIXTURE, "--backend", "cpu", "--dtypes", "f32,fp8"],
      /--dtypes: "fp8" is not one of f32, bf16, f16/,
    ],
    [
      "a batch of none",
      ["--model", FIXTURE, "--backend", "cpu", "--batches", "0,2"],
      /--batches: "0" is not one of 1, 2/,
    ],
    ["zero repeats", ["--model", FIXTURE, "--backend", "cpu", "--repeats", "0"], /--repeats/],
    [
      "K/V heads that do not divide the query heads",
      ["--model", LLAMA_FIXTURE, "--backend", "cpu", "--kv-heads", "4,3"],
      /^error: --kv-heads: 3 does not divide llama-tiny's 4 query heads \(its divisors: 4, 2, 1\)$/,
    ],
    [
      "K/V heads that are not a number",
      ["--model", LLAMA_FIXTURE, "--backend", "cpu", "--kv-heads", "4,two"],
      /--kv-heads: "two" is not a positive integer \(e\.g\. --kv-heads 4,2,1\)/,
    ],
    [
      "K/V heads that do not divide GPT-2's query heads",
      ["--model", FIXTURE, "--backend", "cpu", "--kv-heads", "2,3"],
      /^error: --kv-heads: 3 does not divide gpt2-tiny's 2 query heads \(its divisors: 2, 1\)$/,
    ],
    [
      "an unknown fill",
      ["--model", FIXTURE, "--backend", "cpu", "--fill", "sometimes"],
      /^error: --fill "sometimes" is not one of: prefill, synthetic, auto$/,
    ],
    [
      "two unknown choices, each said",
      ["--model", FIXTURE, "--backend", "tpu", "--fill", "sometimes"],
      /^error: --backend "tpu" is not one of: auto, cpu, cuda, emu; --fill "sometimes" is not one of: prefill, synthetic, auto$/,
    ],
    [
      "--out naming a file",
      ["--model", FIXTURE, "--backend", "cpu", "--out", join(FIXTURE, "config.json")],
      /is a file, not a directory/,
    ],
  ])("%s", (_, args, message) => {
    expectOneErrorLine(profile(...args), message);
  });

  // a machine with more free memory holds it: the rule itself is checked in llama-config.test.ts
  const roomy = freemem() >= 32e9;
  if (roomy)
    console.log("cli-profile.test.ts: skipping 'weights beyond free memory': llama-3.1-8b's f32 weights fit here");
  test.skipIf(roomy)("weights beyond free memory, before any work", () => {
    const r = profile("--preset", "llama-3.1-8b", "--backend", "cpu", "--contexts", "8");
    expectOneErrorLine(
      r,
      /^error: llama-3\.1-8b in f32 is 32\.1 GB of weights, more than .* free memory: use --dtypes bf16$/,
    );
    expect(r.stderr).not.toMatch(/allocating/);
  });

  // ~125 GB at once: weights, a batch-8 cache of 131,072 positions and activations for as many rows
  const huge = freemem() >= 150e9;
  if (huge) console.log("cli-profile.test.ts: skipping 'a context beyond the memory': 150 GB are free here");
  test.skipIf(huge)("a context beyond the memory, before anything is allocated or written", () => {
    const dir = join(out, "beyond-memory");
    const r = profile(
      ...["--preset", "llama-3.2-1b", "--backend", "cpu", "--contexts", "131071", "--batches", "1,8", "--out", dir],
    );
    expectOneErrorLine(
      r,
      /^error: memory: this run at context 131071 × batch 8 needs [\d.]+ GB at once \(weights [\d.]+ GB \+ K\/V cache [\d.]+ GB \+ activations [\d.]+ [kMG]B\) and the machine has [\d.]+ GB usable: the largest context that fits is \d+ \(--contexts ≤ \d+\)$/,
    );
    expect(existsSync(dir)).toBe(false);
  });

  // Llama-3.2-3B: 12.9 GB of f32 weights for the run, and as much again for each of PyTorch and llama.cpp
  const peersFit = freemem() >= 40e9;
  if (peersFit)
    console.log("cli-profile.test.ts: skipping 'the peers' weights beyond free memory': 40 GB are free here");
  test.skipIf(peersFit)("the peers' copies of the weights beyond free memory, before anything is written", () => {
    const dir = join(out, "peers-beyond-memory");
    const r = profile(
      ...["--preset", "llama-3.2-3b", "--backend", "cpu", "--contexts", "8", "--peers", "all", "--out", dir],
    );
    expectOneErrorLine(
      r,
      /^error: memory: the run holds [\d.]+ GB at once and torch and llama\.cpp hold the weights again in f32, 12\.85 GB each: [\d.]+ GB against the machine's [\d.]+ GB usable; profile fewer peers \(--peers\), or a smaller model$/,
    );
    expect(existsSync(dir)).toBe(false);
  });

  // where a GPU is present, --backend cuda is no error: it would start a real profile
  const driver = probeDriver();
  if (driver.ok) console.log("cli-profile.test.ts: skipping 'CUDA without a GPU': this machine has a CUDA device");
  test.skipIf(driver.ok)("CUDA without a GPU", () => {
    expectOneErrorLine(profile("--backend", "cuda"), /CUDA backend unavailable/);
  });
});

function expectOneErrorLine(r: ReturnType<typeof profile>, message: RegExp): void {
  expect(r.code).not.toBe(0);
  const lines = r.stderr.split("\n").filter((l) => l.startsWith("error:"));
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(message);
  expect(r.stderr).not.toMatch(/\n\s+at /);
  expect(r.stderr).not.toMatch(/^model: /m); // the model's lines wait until its flags are known good
}

// A signal while the study measures: it stops at the next safe point (the test would time out otherwise),
// releases the backend, removes its temporary folder, and exits 128 + the signal's number with one line.
describe("SIGINT / SIGTERM during a profile", () => {
  test.each([
    ["SIGINT", 130],
    ["SIGTERM", 143],
  ] as const)("%s: exit %d, one line, no output folder, no temporary folder", async (signal, exitCode) => {
    const target = join(out, `signalled-${signal}`);
    const p = Bun.spawn(
      [
        process.execPath,
        join(ROOT, "src/cli/profile.ts"),
        "--backend",
        "cpu",
        "--model",
        FIXTURE,
        "--contexts",
        "8,16,32,63",
        "--repeats",
        "100000",
        "--out",
        target,
      ],
      { cwd: ROOT, env: { ...process.env, NO_COLOR: "1" }, stdout: "pipe", stderr: "pipe", timeout: 100_000 }, // killed if the signal is ignored
    );
    const reader = p.stderr.getReader();
    const decoder = new TextDecoder();
    let stderr = "";
    while (!stderr.includes("timing ")) {
      // the first point is being measured
      const { value, done } = await reader.read();
      if (done) break;
      stderr += decoder.decode(value);
    }
    p.kill(signal);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      stderr += decoder.decode(value);
    }
    await p.exited;
    expect({ code: p.exitCode, signal: p.signalCode }).toEqual({ code: exitCode, signal: null });
    const errors = stderr.split("\n").filter((l) => l.startsWith("error:"));
    expect(errors).toEqual([`error: interrupted by ${signal}: stopped, nothing written`]);
    expect(await new Response(p.stdout).text()).toBe("");
    expect(existsSync(target)).toBe(false);
    expect(readdirSync(out).filter((n) => n.includes(".partial-"))).toEqual([]);
  });
});
