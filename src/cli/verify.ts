// bun run verify — the CUDA path's checks. On a GPU: every kernel against the CPU backend (twice, bit for bit),
// every fixture of both families (GPT-2 and the Llama family) against its float64 reference in both plans and every
// mode, and on GPT-2 small and SmolLM2-135M the launch modes bit for bit, the plans, cache exactness, graph memory
// and the logits against the CPU backend's. Without one: the nvcc build, its resource report and its SASS (loads in
// flight, registers, local memory), and the same checks on the kernels' sources emulated on the CPU (each kernel in
// two random schedules; the step's properties on the tiny fixtures). Then the kernel model's predictions per kernel
// and per step for GPT-2 small and Llama-3.2-1B (labelled as predictions). Prints a table and ends with a
// pass/fail line; exit 1 on any failure.
import chalk from "chalk";
import { join } from "node:path";

import yargs from "yargs";
import { hideBin } from "yargs/helpers";

import type { Backend } from "../backends/backend.ts";
import { CpuBackend } from "../backends/cpu.ts";
import { CudaBackend } from "../backends/cuda.ts";
import { runCli, UserError } from "../errors.ts";
import {
  ALL_PRESETS,
  largestContextOf,
  loadAnyModel,
  randomWeightsOf,
  type ModelConfig,
  type ModelWeights,
} from "../model/architectures.ts";
import { cudaWithPtx, ensureBuilt, hasNvcc, hasPrebuilt, libraryPath, ROOT } from "../native/build.ts";
import { emuSchedule } from "../native/emu-schedule.ts";
import type { KernelFacts } from "../native/kernel-facts.ts";
import { findCuobjdump } from "../native/sass.ts";
import { missingFamilies, readResourceUsage, type KernelResources } from "../native/resource-usage.ts";
import { DEFAULT_STEP_FORM, PLAN_KINDS, type StepForm } from "../plan.ts";
import {
  decodeKernelInputs,
  GPU_MODELS,
  persistentKernel,
  predictDecodeStep,
  predictRange,
  type GpuModel,
} from "../profile/kernel-model/index.ts";
import {
  kernelPredictionTable,
  layoutPredictionTable,
  parameterTable,
  stepPredictionTable,
  type LayoutCase,
  type StepCase,
} from "../report/prediction-tables.ts";
import { createProgress } from "../report/progress.ts";
import { renderTable } from "../report/tables.ts";
import { freshSeed, SEED_MAX } from "../verify/arena.ts";
import { KERNEL_CASES, runKernelCases } from "../verify/kernel-checks.ts";
import {
  againstCpu,
  cachedEqualsUncached,
  fixtureChecks,
  findFixture,
  graphMemoryStable,
  modesBitIdentical,
  plansAgree,
  readFixture,
  type CheckRow,
} from "../verify/model-checks.ts";
import { librarySassFunctions, sassChecks, sassFacts, type SassFacts } from "../verify/sass-checks.ts";
import { intFlag, parseFlags } from "./common.ts";
import { writeStdout } from "./outputs.ts";

const say = (line: string) => process.stderr.write(`${line}\n`);
const skip = (check: string, detail: string): CheckRow => ({ check, detail, error: null, status: "skip" });
/** A check that threw: a FAIL row with the error's first line, so the other checks still run. */
const threw = (check: string, e: unknown): CheckRow => ({
  check,
  detail: `threw: ${(e as Error).message.split("\n")[0]}`,
  error: null,
  status: "fail",
});

function formatResourceTable(rows: KernelResources[]): string {
  const columns = ["kernel", "arch", "registers", "smem (B)", "stack (B)", "spill stores/loads (B)"].map((header) => ({
    header,
  }));
  return renderTable(
    columns,
    rows.map((r) => [r.kernel, r.arch, r.registers, r.smemBytes, r.stackBytes, `${r.spillStores}/${r.spillLoads}`]),
  );
}

function buildChecks(): CheckRow[] {
  if (!hasNvcc()) {
    const why = hasPrebuilt("cuda")
      ? "nvcc not found here; a library built elsewhere from these sources is used"
      : "nvcc not found (set NVCC or CUDA_HOME)";
    return [skip("nvcc build", why)];
  }
  ensureBuilt("cuda");
  const rows = readResourceUsage() ?? [];
  say(formatResourceTable(rows));
  const spills = rows.filter((r) => r.spillStores + r.spillLoads > 0).map((r) => r.kernel);
  const missing = missingFamilies(rows);
  return [
    {
      check: "nvcc build",
      detail: `sm_90${cudaWithPtx() ? " + PTX" : ""}, warnings as errors; ${rows.length} kernels`,
      error: null,
      status: rows.length ? "pass" : "fail",
    },
    {
      check: "spills",
      detail: spills.length ? `spilling: ${spills.join(", ")}` : "no kernel spills registers",
      error: null,
      status: spills.length ? "fail" : "pass",
    },
    {
      check: "op families",
      detail: missing.length ? `no kernel for ${missing.join(", ")}` : "a kernel for every op family",
      error: null,
      status: missing.length ? "fail" : "pass",
    },
  ];
}

/**
 * The SASS checks of the built library, and its facts for the kernel model (null where it cannot be read); `kernels`:
 * the kernels' facts of the device under test (the CUDA library's, or the emulator's from the same sources).
 */
function sassRows(kernels: KernelFacts): { rows: CheckRow[]; facts: SassFacts[] | null } {
  const cuobjdump = findCuobjdump();
  if (!hasNvcc() && !hasPrebuilt("cuda"))
    return { rows: [skip("sass", "no CUDA library here (no nvcc)")], facts: null };
  if (!cuobjdump)
    return { rows: [skip("sass", "no cuobjdump in $CUDA_HOME/bin or ../shared/cuda-binutils")], facts: null };
  const functions = librarySassFunctions(libraryPath("cuda"), cuobjdump);
  return { rows: sassChecks(functions, kernels), facts: functions.map(sassFacts) };
}

/** The device under test: the GPU, or (auto, without one) the kernels' sources on the CPU emulator. */
function openDevice(choice: "auto" | "cuda" | "emu"): { device: CudaBackend; noGpuLine: string | null } {
  if (choice === "emu") return { device: CudaBackend.open({ emulated: true }), noGpuLine: null };
  try {
    return { device: CudaBackend.open(), noGpuLine: null };
  } catch (e) {
    if (choice === "cuda" || !(e instanceof UserError)) throw e;
    say(`note: ${e.message}; checking the kernels' sources on the CPU emulator instead`);
    return { device: CudaBackend.open({ emulated: true }), noGpuLine: e.message };
  }
}

type Check = [name: string, run: () => CheckRow | CheckRow[]];

/** The fixtures with float64 references the model checks read: in the tree, else beside it in ../shared/fixtures. */
const FIXTURES = ["gpt2-tiny", "gpt2-mini", "llama-tiny", "qwen2-tiny", "qwen3-tiny", "llama-mini"] as const;

/** Each fixture's logits and greedy tokens in both plans and every mode; skipped, with where it was looked for, when absent. */
function fixtureRows(device: CudaBackend): Check[] {
  return FIXTURES.flatMap((name) => {
    const dir = findFixture([join(ROOT, "test/fixtures", name), join(ROOT, "../shared/fixtures", name)]);
    if (!dir) return [[name, () => skip(name, "fixture not found in test/fixtures or ../shared/fixtures")] as Check];
    return PLAN_KINDS.map((plan) =>
      on(plan, name, () => fixtureChecks(device, loadAnyModel(dir), readFixture(dir), plan)),
    );
  });
}

/** A check with `suffix` (its model, its plan) after its name and its rows' names, so its FAIL row too says whose. */
const on = (suffix: string, check: string, run: () => CheckRow | CheckRow[]): Check => [
  `${check}, ${suffix}`,
  () => [run()].flat().map((r) => ({ ...r, check: `${r.check}, ${suffix}` })),
];

/**
 * The step's properties on one model of each family: the launch modes bit for bit, the plans agreeing, the cache
 * exact, the graph's memory steady across replays (and, on a GPU, the logits against the CPU backend's): GPT-2 small
 * and SmolLM2-135M with seeded weights on a GPU; on the emulator, which would take many minutes over them, the tiny
 * fixtures of each family.
 */
function stepChecks(device: CudaBackend, cpu: Backend): Check[] {
  const gpu = device.kind === "cuda";
  // loaded when their first check runs, so that a failure to make them is that check's FAIL row
  const models: { config: ModelConfig; load: () => ModelWeights }[] = gpu
    ? (["gpt2", "smollm2-135m"] as const).map((preset) => {
        const config = ALL_PRESETS[preset]!;
        return { config, load: () => randomWeightsOf(config, 0) };
      })
    : ["gpt2-tiny", "llama-tiny"].map((fixture) => {
        const w = loadAnyModel(join(ROOT, "test/fixtures", fixture)); // a few MB, read once
        return { config: w.config, load: () => w };
      });
  return models.flatMap(({ config, load }): Check[] => {
    let loaded: ModelWeights | undefined;
    const w = () => (loaded ??= load());
    const name = config.name;
    const prompt = Array.from({ length: 8 }, (_, i) => (i * 7919 + 1) % config.vocab_size);
    // on a GPU 200 new tokens; on the emulator as many as the fixture's positions hold
    const n = gpu ? 200 : config.n_positions - prompt.length;
    const cpuCheck: Check = gpu
      ? [`${name} vs CPU`, () => againstCpu(device, cpu, w(), [...prompt, ...prompt])]
      : [
          `${name} vs CPU`,
          () => skip(`${name} vs CPU`, "on a GPU only (the emulator is the CPU's twin): the fixtures above check it"),
        ];
    return [
      cpuCheck,
      ...PLAN_KINDS.map((plan) =>
        on(`${name}, ${plan}`, "launch modes", () => modesBitIdentical(device, w(), prompt, n, plan)),
      ),
      on(name, "plans", () => plansAgree(device, w(), prompt, n)),
      on(name, "cache exactness", () => cachedEqualsUncached(device, w(), prompt, n)),
      on(name, "graph memory", () => graphMemoryStable(device, w(), gpu ? 1000 : 50)),
    ];
  });
}

/**
 * The kernel model's predictions for a model's decode step (at its longest context, at most PREDICTED_CONTEXT), launch
 * shapes captured on the device under test.
 */
function printPredictions(device: CudaBackend, sass: SassFacts[] | null, config: ModelConfig): void {
  const context = Math.min(largestContextOf(config), PREDICTED_CONTEXT);
  const { kernels } = device;
  const predict = (form: StepForm, ctx: number, model: GpuModel) =>
    predictRange(
      decodeKernelInputs(config, form, ctx, kernels, sass),
      model,
      persistentKernel(config, form, kernels.facts, sass),
    );
  const cases: StepCase[] = (["h200", "a40"] as const).flatMap((gpu) =>
    PLAN_KINDS.flatMap((plan) =>
      [8, context].map(
        (ctx): StepCase => ({
          gpu,
          plan,
          context: ctx,
          predict: (model) => predict({ ...DEFAULT_STEP_FORM, plan }, ctx, model),
        }),
      ),
    ),
  );
  const out = (line: string) => process.stdout.write(`${line}\n`);
  const source = sass
    ? "loads in flight and registers from the SASS"
    : "SASS not read here: the design's loads and 64 registers assumed";
  out(
    `\nPREDICTED (kernel model, src/profile/kernel-model/; not measured) — ${config.name} decode step, fused plan, context ${context}, ${GPU_MODELS.h200.name};`,
  );
  out(`launch shapes from ${device.deviceName}'s launchers, ${source}:`);
  out(kernelPredictionTable(predictDecodeStep(config, DEFAULT_STEP_FORM, context, GPU_MODELS.h200, kernels, sass)));
  out(
    "\nPREDICTED step time per launch mode, ms at the working estimates (optimistic-pessimistic ends of their ranges):",
  );
  out(stepPredictionTable(cases));
  const layouts: LayoutCase[] = (["f32", "bf16"] as const).flatMap((dtype) =>
    [1, 4, 8].map(
      (batch): LayoutCase => ({
        dtype,
        batch,
        predict: (model) => predict({ plan: "fused", batch, weights: dtype, kv: dtype }, context, model),
      }),
    ),
  );
  out(
    `\nPREDICTED fused step by storage type and batch (${GPU_MODELS.h200.name}, context ${context}), ms at the working estimates (ranges):`,
  );
  out(layoutPredictionTable("h200", layouts));
}

/** The models predicted: GPT-2 small (the seed's) and Llama-3.2-1B (the field's megakernel and graphs + PDL results). */
const PREDICTED_MODELS = ["gpt2", "llama-3.2-1b"] as const;
/** Llama-3.2-1B's 131,072 positions would make the cache the step: predicted where the field measures, 8k at most. */
const PREDICTED_CONTEXT = 8191;

await runCli(async () => {
  const argv = await parseFlags(
    yargs(hideBin(process.argv))
      .scriptName("bun run verify")
      .usage(
        "$0 [options]: the CUDA kernels against their CPU twins, the model in both plans and every launch mode, the SASS checks, and the kernel model's predictions (on the CPU emulator without a GPU)",
      )
      .option("backend", {
        choices: ["auto", "cuda", "emu"] as const,
        default: "auto" as const,
        describe: "the GPU, or the kernels' sources on the CPU emulator (auto: the GPU if there is one)",
      })
      .option("seed", { type: "number", describe: "seed of the random inputs (default: fresh each run, printed)" }),
  );
  const t0 = Date.now();
  const seed = argv.seed === undefined ? freshSeed() : intFlag("seed", argv.seed, 0, SEED_MAX);
  const { device, noGpuLine } = openDevice(argv.backend); // first: --backend cuda without a GPU is its one line
  const rows: CheckRow[] = buildChecks();
  const sass = sassRows(device.kernels.facts);
  rows.push(...sass.rows);
  const cpu = CpuBackend.open();
  say(`device: ${device.deviceName} (${device.kind}); reference: CPU backend (${cpu.deviceName}); seed ${seed}`);
  if (noGpuLine !== null) {
    rows.push({
      check: "no GPU",
      detail: `--backend cuda fails with one line: "${noGpuLine}"`,
      error: null,
      status: noGpuLine.includes("\n") ? "fail" : "pass",
    });
  }
  // every kernel case twice, its device outputs bit for bit: on the emulator in two random schedules
  const schedule = device.kind === "emu" ? emuSchedule(ensureBuilt("emu", { quiet: true }).path) : null;
  const orders = [(seed % 0x7fffffff) + 1, ((seed * 7 + 3) % 0x7fffffff) + 1];
  // one check that throws becomes a FAIL row; the others still run
  const kernels: Check[] = KERNEL_CASES.map((c) => [
    `kernel ${c.kernel}`,
    () => {
      schedule?.set(orders[0]!);
      const [k] = runKernelCases(device, cpu, seed, [c], () => schedule?.set(orders[1]!));
      const detail = `${k!.shape}${k!.repeatable ? "" : "; a second run differed"}`;
      return { check: `kernel ${k!.kernel}`, detail, error: k!.error, status: k!.ok ? "pass" : "fail" };
    },
  ]);
  const checks = [...kernels, ...fixtureRows(device), ...stepChecks(device, cpu)];
  // on stderr: on the emulator the checks take many minutes
  const progress = createProgress({ total: checks.length, label: "verify", startedAt: performance.timeOrigin });
  for (const [i, [check, run]] of checks.entries()) {
    progress.update(i, check);
    try {
      rows.push(...[run()].flat());
    } catch (e) {
      rows.push(threw(check, e));
    }
  }
  progress.update(checks.length);
  progress.stop();

  schedule?.close();
  // a model whose predictions throw is a FAIL row, and the table still comes
  for (const name of PREDICTED_MODELS) {
    try {
      printPredictions(device, sass.facts, ALL_PRESETS[name]!);
    } catch (e) {
      rows.push(threw(`predictions, ${name}`, e));
    }
  }
  process.stdout.write("\nThe model's parameters (leads, to be calibrated by the first GPU run):\n");
  process.stdout.write(`${parameterTable()}\n\n`);

  const status = (s: CheckRow["status"]) =>
    s === "pass" ? chalk.green("pass") : s === "fail" ? chalk.red.bold("FAIL") : chalk.yellow("skip");
  const columns = [
    { header: "check" },
    { header: "detail" },
    { header: "max rel. error", format: (x: number) => x.toExponential(2) },
    { header: "status" },
  ];
  writeStdout(
    `${renderTable(
      columns,
      rows.map((r) => [r.check, r.detail, r.error, status(r.status)]),
    )}\n`,
  );
  const count = (s: CheckRow["status"]) => rows.filter((r) => r.status === s).length;
  const failed = count("fail");
  writeStdout(
    `verify on ${device.deviceName} (${device.kind}), ${new Date().toISOString()}, ${((Date.now() - t0) / 1e3).toFixed(1)} s: ` +
      `${count("pass")} passed, ${failed} failed, ${count("skip")} skipped — ${failed ? "FAIL" : "PASS"}\n`,
  );
  device.close();
  cpu.close();
  if (failed) process.exit(1);
});
