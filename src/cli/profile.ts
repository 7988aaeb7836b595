// bun run profile — the decode-floor study: eager vs graph over a context sweep, per-kernel breakdowns,
// where the step's time goes, FLOPs/bytes against measured peaks, KV memory; results under profiles/.
import {
  AUTO_PREFIXES_RULE,
  PROMPT_CACHE_SUFFIX,
  PROMPT_CACHE_TOKENS,
  promptCacheContext,
} from "../profile/prompt-cache.ts";
import { cpus, freemem, loadavg } from "node:os";
import { basename, join } from "node:path";

import yargs from "yargs";
import { hideBin } from "yargs/helpers";

import { defaultSweep, type Backend } from "../backends/backend.ts";
import type { Instrument } from "../backends/instrument.ts";
import { BACKEND_CHOICES, openBackend, type BackendChoice } from "../backends/select.ts";
import { runCli, UserError } from "../errors.ts";
import {
  kvHeadsOf,
  largestContextOf,
  positionsLimitOf,
  randomWeightsOf,
  withKvHeads,
  type ModelConfig,
  type ModelWeights,
} from "../model/architectures.ts";
import { ROOT } from "../native/build.ts";
import {
  parsePeers,
  parseTorchVariants,
  peersHoldingWeights,
  PeerSet,
  TORCH_VARIANTS,
  type PeerName,
  type TorchVariant,
} from "../peers/peer-set.ts";
import {
  AGREEMENT_PROMPT,
  AGREEMENT_TOKENS,
  fitLine,
  largestStepBytes,
  Study,
  largestStudyContext,
  studiedContext,
  studyMemoryFit,
  studyUnits,
  type StudyOptions,
} from "../profile/study.ts";
import { FILL_CHOICES, PREFILL_LIMIT_S, type FillChoice } from "../profile/fill.ts";
import type { KvVariant } from "../profile/interventions.ts";
import { buildSummary } from "../profile/summary.ts";
import type { MemoryFit, StudyMode } from "../profile/types.ts";
import { memoryBytes } from "../run/memory-fit.ts";
import { placementTotal, storedWeightBytes } from "../run/model-buffers.ts";
import { Session } from "../run/session.ts";
import { createProgress } from "../report/progress.ts";
import { renderTerminalSummary } from "../report/terminal.ts";
import { writeProfileOutputs, type WrittenOutputs } from "../report/write.ts";
import { DEFAULT_STEP_FORM, PLAN_KINDS, type PlanKind, type StepForm } from "../plan.ts";
import {
  availableModes,
  LAUNCH_MODE_NAMES,
  launchMode,
  modeForm,
  replayMode,
  unavailableMode,
  type LaunchModeName,
  type ModeForm,
} from "../run/launch-modes.ts";
import { DTYPE_NAMES, MAX_BATCH, type DtypeName } from "../ops.ts";
import { SYNTHETIC_SAMPLE_ROWS } from "../run/synthetic-fill.ts";
import {
  checkHostMemory,
  DEFAULT_PRESET,
  DEFAULT_SEED,
  intFlag,
  loadAnyWeights,
  MODEL_FLAG_HELP,
  parseContexts,
  parseFlags,
  PRESET_CHOICES,
  PRESET_FLAG_HELP,
} from "./common.ts";
import { watchSignals } from "./interrupt.ts";
import { ProfileOutput, writeStdout } from "./outputs.ts";

const MODE_CHOICES = [...LAUNCH_MODE_NAMES, "all"] as const;
const E2E_PROMPT = 8;
const MAX_LISTED_PROBLEMS = 10;
const MAX_REPEATS = 100_000;

function modesFor(choice: (typeof MODE_CHOICES)[number], backend: Backend, step: ModeForm): StudyMode[] {
  const available = availableModes(backend, step).map((m) => m.name as LaunchModeName);
  if (choice === "all") return ["uncached", ...available];
  if (!launchMode(choice).available(backend, step)) throw unavailableMode(choice, backend, step, ["all"]);
  return [choice];
}

/**
 * Contexts to sweep: the user's (each must fit: a cached step at context c writes position c < n_positions), or the
 * defaults capped, and the backend's long contexts that the model's positions hold.
 */
function contextsFor(
  flag: string | undefined,
  backend: Backend,
  cfg: ModelConfig,
  note: (s: string) => void,
): number[] {
  const max = largestContextOf(cfg);
  if (flag !== undefined) return parseContexts(flag, cfg);
  if (backend.studyDefaults.contexts.some((c) => c > max))
    note(
      `note: contexts capped at ${max}, as a step writes the position after its context: the model has ${positionsLimitOf(cfg)}`,
    );
  return defaultSweep(backend.studyDefaults, cfg.n_positions);
}

/** The peers' copies of the weights (fp32, one a peer process) beside what the run holds, against the same free memory. */
function checkPeersFit(fit: MemoryFit, names: readonly PeerName[], backend: Backend, f32WeightBytes: number): void {
  const holders = peersHoldingWeights(names, backend.kind);
  const need = placementTotal(fit.need) + holders.length * f32WeightBytes;
  if (need <= fit.free_bytes) return;
  throw new UserError(
    `memory: the run holds ${memoryBytes(placementTotal(fit.need))} at once and ${holders.join(" and ")} hold the weights again in f32, ${memoryBytes(f32WeightBytes)} each: ${memoryBytes(need)} against the ${backend.kind === "cuda" ? "GPU" : "machine"}'s ${memoryBytes(fit.free_bytes)} usable; profile fewer peers (--peers), or a smaller model`,
  );
}

/** The default sweep without the contexts past what the run fits (a given --contexts is refused instead). */
function defaultContextsThatFit(
  backend: Backend,
  weights: ModelWeights,
  opts: StudyOptions,
  note: (s: string) => void,
): number[] {
  const largest = largestStudyContext(backend, weights, opts);
  const fitting = opts.contexts.filter((c) => c <= largest);
  if (fitting.length < opts.contexts.length && fitting.length > 0)
    note(`note: the default contexts past ${largest} left out: no longer one fits in memory`);
  return fitting.length > 0 ? fitting : opts.contexts;
}

/**
 * profile --prompt-cache: prefix lengths, each with its suffix and generated tokens inside the model's positions;
 * "off", none; without the flag, those the run chooses ("auto").
 */
function promptCacheFor(flag: string | undefined, cfg: ModelConfig): number[] | "auto" | undefined {
  const nPositions = cfg.n_positions;
  if (flag === undefined) return "auto";
  if (flag.trim() === "off") return undefined;
  const most = nPositions - promptCacheContext(0);
  const values = flag.split(",").map((s) => {
    const n = Number(s.trim());
    if (!/^\d+$/.test(s.trim()) || n < 1)
      throw new UserError(
        `--prompt-cache: ${JSON.stringify(s)} is not a positive integer (e.g. --prompt-cache 1024,4096, or off)`,
      );
    if (n > most)
      throw new UserError(
        `--prompt-cache: a ${n}-token prefix does not fit: with its ${PROMPT_CACHE_SUFFIX}-token suffix and ${PROMPT_CACHE_TOKENS} generated tokens it needs ${promptCacheContext(n)} positions, and the model has ${positionsLimitOf(cfg)} (longest prefix ${most})`,
      );
    return n;
  });
  return [...new Set(values)].sort((a, b) => a - b);
}

const BATCH_CHOICES = Array.from({ length: MAX_BATCH }, (_, i) => String(i + 1));

/** A comma-separated flag of distinct values from `choices`, or `fallback` when not given. */
function listFlag<T extends string>(
  flag: string,
  value: string | undefined,
  choices: readonly T[],
  fallback: T[],
): T[] {
  if (value === undefined) return fallback;
  const items = value.split(",").map((s) => s.trim());
  const bad = items.find((s) => !(choices as readonly string[]).includes(s));
  if (bad !== undefined) throw new UserError(`--${flag}: ${JSON.stringify(bad)} is not one of ${choices.join(", ")}`);
  return [...new Set(items as T[])];
}

/**
 * profile --kv-heads: the model with each K/V-head count (a divisor of its query heads), most heads first — its
 * own weights at its own count, seeded weights of the reshaped config at the others; without the flag, its own.
 */
function kvVariantsFor(flag: string | undefined, weights: ModelWeights, seed: number): KvVariant[] {
  const cfg = weights.config;
  const own = kvHeadsOf(cfg);
  if (flag === undefined) return [{ kv_heads: own, weights }];
  const heads = cfg.n_head;
  const divisors = Array.from({ length: heads }, (_, i) => heads - i).filter((d) => heads % d === 0);
  const counts = flag.split(",").map((item) => {
    const s = item.trim();
    const n = Number(s);
    if (!/^\d+$/.test(s) || n < 1)
      throw new UserError(
        `--kv-heads: ${JSON.stringify(s)} is not a positive integer (e.g. --kv-heads ${divisors.join(",")})`,
      );
    if (heads % n !== 0)
      throw new UserError(
        `--kv-heads: ${n} does not divide ${cfg.name}'s ${heads} query heads (its divisors: ${divisors.join(", ")})`,
      );
    return n;
  });
  return [...new Set(counts)]
    .sort((a, b) => b - a)
    .map((k) =>
      k === own ? { kv_heads: k, weights } : { kv_heads: k, weights: randomWeightsOf(withKvHeads(cfg, k), seed) },
    );
}

/** The interventions run in the launch mode that issues a step fastest: captured where there are graphs, natively elsewhere. */
const fastestMode = (backend: Backend) => replayMode(backend);

function defaultOutDir(backend: Backend, mode: string, withPeers: boolean, plan: PlanKind): string {
  const date = new Date().toISOString().slice(0, 10);
  return join(
    ROOT,
    "profiles",
    `${date}-${backend.kind}-${mode}${plan === "fused" ? "" : `-${plan}`}${withPeers ? "-peers" : ""}`,
  );
}

/** The peers, on the project's weights, with the project's threads, holding every context the study visits. */
async function openPeers(
  names: ReturnType<typeof parsePeers>,
  torchVariants: TorchVariant[],
  backend: Backend,
  weights: ModelWeights,
  modelDir: string | undefined,
  opts: StudyOptions,
  say: (l: string) => void,
) {
  const threads = backend.describe().detail.threads;
  const set = await PeerSet.open({
    peers: names,
    torchVariants,
    weights,
    modelDir,
    device: backend.kind === "cuda" ? "cuda" : "cpu",
    threads: typeof threads === "number" ? threads : cpus().length,
    maxContext: Math.max(...opts.contexts, AGREEMENT_PROMPT + AGREEMENT_TOKENS),
    fillSeed: opts.seed,
    say,
  });
  if (set.subjects.length)
    say(`peers: ${set.subjects.map((s) => s.short).join(", ")}, timed step by step beside the modes`);
  return set;
}

await runCli(async () => {
  const argv = await parseFlags(
    yargs(hideBin(process.argv))
      .scriptName("bun run profile")
      .usage("$0 [options]: where the time of a generated token goes, eager vs graph, over a context sweep")
      .option("mode", {
        choices: MODE_CHOICES,
        default: "all" as const,
        describe: "launch mode of the cached step; all = every mode plus the uncached baseline",
      })
      .option("plan", {
        choices: PLAN_KINDS,
        describe:
          "ops of the cached step: fused (the default: 5 launches per layer) or unfused (one launch per op: 11 per layer for GPT-2, 12 for the Llama family)",
      })
      .option("backend", {
        choices: BACKEND_CHOICES,
        default: "auto" as BackendChoice,
        describe: "cuda, cpu, auto (cuda if available), emu (the CUDA sources on the CPU)",
      })
      .option("model", {
        type: "string",
        describe: MODEL_FLAG_HELP,
      })
      .option("preset", {
        choices: PRESET_CHOICES,
        describe: PRESET_FLAG_HELP,
      })
      .conflicts("model", "preset")
      .option("contexts", {
        type: "string",
        describe:
          "comma-separated context lengths (default: the backend's, 8,10,16,…,1000,1024 on a GPU, capped by n_positions, and 2048…32768 where the model has the positions; 8…128 on the CPU, and 2048, 4096, 8192 where it has them; contexts past what fits in memory left out)",
      })
      .option("fill", {
        choices: FILL_CHOICES,
        default: "auto" as FillChoice,
        describe: `how each context's cache is filled: prefill (real), synthetic (a ${SYNTHETIC_SAMPLE_ROWS}-token prefill, the rest drawn to its distribution), auto (prefill where it is estimated under ${PREFILL_LIMIT_S} s)`,
      })
      .option("repeats", {
        type: "number",
        describe: "timed steps per point (default: the backend's, 50 on a GPU, 10 on the CPU)",
      })
      .option("warmup", {
        type: "number",
        describe: "untimed steps before each point (default: the backend's, 10 on a GPU, 2 on the CPU)",
      })
      .option("traced-steps", {
        type: "number",
        default: 5,
        describe: "steps traced per point for the per-kernel breakdown",
      })
      .option("e2e-tokens", {
        type: "number",
        describe: `tokens generated end to end from an ${E2E_PROMPT}-token prompt (default: the backend's, 1016 on a GPU, 56 on the CPU)`,
      })
      .option("out", {
        type: "string",
        describe:
          "output directory (default profiles/<date>-<backend>-<mode>/, or -2, -3 … after it: an earlier run is never replaced)",
      })
      .option("force", {
        type: "boolean",
        default: false,
        describe: "let an explicit --out that holds an earlier run be replaced (once the new run is complete)",
      })
      .option("json", {
        type: "boolean",
        default: false,
        describe: "print summary.json to stdout (tables and progress stay off stdout)",
      })
      .option("kernels", {
        type: "boolean",
        default: true,
        describe: "trace every op (CUPTI on the GPU, native timers on the CPU); --no-kernels skips it",
      })
      .option("seed", { type: "number", default: DEFAULT_SEED, describe: "seed of the random weights and prompts" })
      .option("threads", {
        type: "number",
        describe: "CPU backend threads, 1 up to the CPUs this process may run on (default: all of them)",
      })
      .option("peers", {
        type: "string",
        describe:
          "torch, llama.cpp (comma-separated) or all: PyTorch and llama.cpp on the same weights, timed beside the modes",
      })
      .option("torch-variants", {
        type: "string",
        describe: `the PyTorch peer's variants (${TORCH_VARIANTS.join(", ")}; comma-separated; default: all)`,
      })
      .option("dtypes", {
        type: "string",
        describe: `storage types of the weights to compare (${DTYPE_NAMES.join(", ")}; comma-separated); the first is the study's own (default: the checkpoint's, f32 for seeded weights)`,
      })
      .option("kv-dtype", {
        choices: DTYPE_NAMES,
        describe: "storage type of the KV cache in every configuration (default: each configuration's weight type)",
      })
      .option("kv-heads", {
        type: "string",
        describe:
          "K/V-head counts to compare (divisors of the query heads, comma-separated, e.g. 9,3,1: MHA, GQA, MQA): the model's attention reshaped (its own count with its weights, the others with seeded weights of their shape), timed beside each other in the fastest launch mode",
      })
      .option("prompt-cache", {
        type: "string",
        describe: `prefix lengths (comma-separated, e.g. 1024,4096) at which time to first token is timed cold and with the prefix's keys and values kept (in memory and in a file), ${PROMPT_CACHE_SUFFIX} more prompt tokens prefilled; off for none (default: ${AUTO_PREFIXES_RULE})`,
      })
      .option("batches", {
        type: "string",
        describe: `sequences per step to compare (1..${MAX_BATCH}, comma-separated, e.g. 1,4): every storage type × batch is timed in the fastest launch mode`,
      }),
  );

  const say = (line: string) => process.stderr.write(`${line}\n`);
  if (argv.force && argv.out === undefined)
    throw new UserError(
      "--force replaces what an explicit --out holds; the default output directory never replaces an earlier run",
    );
  const threads = argv.threads === undefined ? undefined : intFlag("threads", argv.threads, 1, 1024);
  const peerNames = parsePeers(argv.peers);
  const torchVariants = parseTorchVariants(argv["torch-variants"]);
  if (argv["torch-variants"] !== undefined && !peerNames.includes("torch"))
    throw new UserError("--torch-variants chooses the PyTorch peer's variants: give --peers torch (or all) too");
  let output =
    argv.out === undefined ? undefined : ProfileOutput.prepare(argv.out, { fresh: false, force: argv.force });
  const interrupt = watchSignals();
  let backend: Backend | undefined;
  let instrument: Instrument | undefined;
  let study: Study | undefined;
  let peers: PeerSet | undefined;
  let progress: ReturnType<typeof createProgress> | undefined;
  try {
    // the model's lines and the notes on its flags, said once every flag is known good: a bad one is one line
    const lines: string[] = [];
    const later = (l: string) => lines.push(l);
    const weights = loadAnyWeights(argv.model, argv.preset ?? DEFAULT_PRESET, intFlag("seed", argv.seed, 0), later);
    const cfg = weights.config;
    const plan: PlanKind = argv.plan ?? DEFAULT_STEP_FORM.plan;
    const promptCache = promptCacheFor(argv["prompt-cache"], cfg);
    backend = await openBackend(argv.backend, { threads, note: later });
    const defaults = backend.studyDefaults;
    const e2eMax = cfg.n_positions - E2E_PROMPT;
    const dtypes = listFlag("dtypes", argv.dtypes, DTYPE_NAMES, [weights.storedAs]);
    // the CPU's and the emulator's weights are in host memory, each storage type's at least alone (the fit below
    // counts what the run holds at once)
    if (backend.kind !== "cuda") for (const dtype of dtypes) checkHostMemory(cfg, dtype, freemem(), "--dtypes");
    const batches = listFlag("batches", argv.batches, BATCH_CHOICES, ["1"]).map(Number);
    const formOf = (dtype: DtypeName, batch: number): StepForm => ({
      plan,
      batch,
      weights: dtype,
      kv: argv["kv-dtype"] ?? dtype,
    });
    const studied = formOf(dtypes[0]!, 1);
    const modes = modesFor(argv.mode, backend, modeForm(studied, cfg));
    const forms = dtypes.flatMap((dtype) => batches.map((batch) => formOf(dtype, batch)));
    const variants = kvVariantsFor(argv["kv-heads"], weights, intFlag("seed", argv.seed, 0));
    if (backend.kind !== "cuda")
      for (const v of variants)
        for (const dtype of dtypes) checkHostMemory(v.weights.config, dtype, freemem(), "--dtypes");
    // timed unless the one configuration asked for is the study's own (--batches 4 alone is batch 4 timed)
    const intervened =
      forms.length * variants.length > 1 || forms[0]!.batch !== 1 || variants[0]!.kv_heads !== kvHeadsOf(cfg);
    const asked = (["dtypes", "batches", "kv-heads"] as const).filter((f) => argv[f] !== undefined);
    if (!intervened && asked.length > 0)
      later(
        `note: ${asked.map((f) => `--${f} ${argv[f]}`).join(" ")} name${asked.length === 1 ? "s" : ""} only the study's own configuration (${dtypes[0]}, batch 1, ${kvHeadsOf(cfg)} K/V heads): no interventions are timed beside it`,
      );
    const opts: StudyOptions = {
      modes,
      form: studied,
      ...(intervened ? { interventions: { forms, variants, mode: fastestMode(backend) } } : {}),
      contexts: contextsFor(argv.contexts, backend, cfg, later),
      fill: argv.fill,
      repeats: intFlag("repeats", argv.repeats ?? defaults.repeats, 1, MAX_REPEATS),
      warmup: intFlag("warmup", argv.warmup ?? defaults.warmup, 0, MAX_REPEATS),
      kernels: argv.kernels,
      tracedSteps: intFlag("traced-steps", argv["traced-steps"], 1, 1000),
      e2e: {
        promptTokens: E2E_PROMPT,
        newTokens: intFlag("e2e-tokens", argv["e2e-tokens"] ?? Math.min(defaults.e2eTokens, e2eMax), 1, e2eMax),
      },
      ...(promptCache ? { promptCache } : {}),
      seed: intFlag("seed", argv.seed, 0),
      checkpoint: () => interrupt.checkpoint(),
      say,
    };
    if (argv.contexts === undefined) opts.contexts = defaultContextsThatFit(backend, weights, opts, later);
    const fit = studyMemoryFit(backend, weights, opts);
    checkPeersFit(fit, peerNames, backend, storedWeightBytes(cfg, "f32"));
    lines.forEach(say);
    say(fitLine(fit, Session.positionsHeld(cfg, studiedContext(opts))));
    output ??= ProfileOutput.prepare(defaultOutDir(backend, argv.mode, peerNames.length > 0, plan), {
      fresh: true,
      force: false,
    });
    const [load] = loadavg();
    if (load! >= cpus().length - 0.5) {
      say(
        `warning: load average ${load!.toFixed(1)} on ${cpus().length} cores: other processes compete for the CPU, so times will be inflated`,
      );
    }
    instrument = backend.instrument();
    say(
      `device: ${backend.deviceName} (${backend.kind}); every point timed first, then ${opts.kernels ? "traced" : "not traced (--no-kernels)"}`,
    );
    const peaks = instrument.measurePeaks(largestStepBytes(weights.config, opts));
    await interrupt.checkpoint();
    const launch = instrument.measureLaunch();
    peers = peerNames.length
      ? await openPeers(peerNames, torchVariants, backend, weights, argv.model, opts, say)
      : undefined;
    study = new Study(backend, instrument, weights, opts, fit);
    await interrupt.checkpoint();
    progress = createProgress({ total: studyUnits(opts), label: "profile", startedAt: performance.timeOrigin });
    opts.onProgress = (done, _total, what) => progress!.update(done, what);
    const result = await study.run(peers);
    await peers?.close();
    peers = undefined;
    progress.stop();
    progress = undefined;
    const command = ["bun run profile", ...process.argv.slice(2)].join(" ");
    const summary = buildSummary({ command, backend, instrument, weights, opts, peaks, launch, result });
    let written: WrittenOutputs | undefined;
    // every file is written into a folder beside the target and validated; only then is it renamed into place
    const outDir = output.commit((dir) => {
      written = writeProfileOutputs(dir, summary, result.traces);
      if (written.summaryProblems.length) {
        throw new UserError(
          `summary.json breaks its schema (${written.summaryProblems.length} problems, first: ${written.summaryProblems[0]}); nothing written`,
        );
      }
    });
    output = undefined;
    writeStdout(argv.json ? `${JSON.stringify(summary, null, 2)}\n` : renderTerminalSummary(summary));
    say(`wrote ${written!.paths.length} files to ${outDir}: ${written!.paths.map((p) => basename(p)).join(", ")}`);
    // a trace problem comes from the records (a tracer's broken ones); every number stands, so it is a warning
    for (const p of written!.traceProblems.slice(0, MAX_LISTED_PROBLEMS)) say(`warning: ${p}`);
  } catch (e) {
    output?.discard();
    throw e;
  } finally {
    progress?.stop();
    await peers?.close();
    study?.close();
    instrument?.close();
    backend?.close();
    interrupt.dispose();
  }
});
