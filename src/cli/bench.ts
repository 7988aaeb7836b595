// bun run bench cpu — the CPU backend against this machine's own limits, measured in one run:
//   decode   the cached step at contexts 8, 128, 512, 1000 ÷ its memory floor, (weight bytes + KV bytes
//            read) ÷ the read bandwidth a probe past the last-level cache measures in the same run, a
//            pass right before each step (src/backends/read-probe.ts)                      goal ≤ 1.3
// The model: GPT-2 small's shapes with seeded weights, another preset's (--preset), or a checkpoint (--model).
//   contend  the cached step while another program runs N busy threads ÷ the quiet step   goal ≤ 3 (N = 2)
//   prefill  the many-rows linear on the model's four shapes (and the many-query attention), GFLOP/s
//            against the measured FMA peak and OpenBLAS's sgemm when it is installed      goal ≤ 1.3× OpenBLAS
// --decode, --contend N and --prefill each name a section; given any, only those run (none: all three).
import { spawn, type Subprocess } from "bun";
import { join } from "node:path";
import { loadavg } from "node:os";
import yargs from "yargs";
import { hideBin } from "yargs/helpers";

import { CpuBackend } from "../backends/cpu.ts";
import { hostPageShares, hugeShare, hugeShareText } from "../backends/huge-pages.ts";
import type { PairedStep } from "../backends/instrument.ts";
import { measureRead, type ReadTracker } from "../backends/read-probe.ts";
import { FP32_PEAK_PASSES } from "../backends/cpu-instrument.ts";
import { runCli, UserError } from "../errors.ts";
import {
  familyOf,
  headDimOf,
  kvColumns,
  kvHeadsOf,
  largestContextOf,
  type ModelConfig,
  type ModelWeights,
} from "../model/architectures.ts";
import { DEFAULT_STEP_FORM } from "../plan.ts";
import { openOpenBlas } from "../native/openblas.ts";
import { DTYPES } from "../ops.ts";
import { pointFloor } from "../profile/memory-floor.ts";
import { cachedStepWork, stepWork, sumWork } from "../profile/work-model.ts";
import { formatBytes } from "../report/tables.ts";
import { availableModes, replayMode, type LaunchMode } from "../run/launch-modes.ts";
import { Session } from "../run/session.ts";
import { summarize } from "../stats.ts";
import {
  checkHostMemory,
  DEFAULT_PRESET,
  intFlag,
  loadAnyWeights,
  MODEL_FLAG_HELP,
  parseContexts,
  parseFlags,
  PRESET_CHOICES,
  PRESET_FLAG_HELP,
} from "./common.ts";
import { writeStdout } from "./outputs.ts";

const DEFAULT_CONTEXTS = [8, 128, 512, 1000];
const DEFAULT_CONTEND_THREADS = 2;
const CONTEND_CONTEXT = 128;
/** The contention section's context, within the model's positions. */
const contendContext = (cfg: ModelConfig) => Math.min(CONTEND_CONTEXT, largestContextOf(cfg));
const CONTEND_ROUNDS = 4;
const PREFILL_ROWS = [128, 1000];
/** The prefill table's first column: "1000×1536→576 (gate_up_proj)" and the like. */
const LABEL_WIDTH = 30;
const PREFILL_REPEATS = 7;
const DECODE_ROUNDS = 5;
const WARMUP_STEPS = 3;

const nowMs = () => Bun.nanoseconds() / 1e6;
/** One line of the report on stdout (a closed pipe or a full disk is one error line: cli/outputs.ts). */
const line = (text: string) => writeStdout(`${text}\n`);
const gflops = (flops: number, ms: number) => flops / ms / 1e6;
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");

interface Sections {
  decode: boolean;
  contend: number; // competing threads; 0 = no contention section
  prefill: boolean;
}

/** (weight bytes + KV-cache bytes the attention reads) of the session's cached step at a context: the bytes that must cross memory. */
function floorBytes(session: Session<ModelWeights>, context: number): { weights: number; kv: number } {
  const ops = cachedStepWork(session.config, context, session.form);
  return { weights: sumWork(ops).weight_bytes, kv: sumWork(ops.filter((o) => o.family === "attention")).kv_bytes };
}

/**
 * Each of `steps` cached steps at `context` in a launch mode, after a warm-up: its ms, and the memory's read rate that
 * `readPass` measured right before it (null: none).
 */
function timeCachedSteps(
  session: Session<ModelWeights>,
  context: number,
  steps: number,
  mode: LaunchMode,
  readPass: () => number | null = () => null,
): PairedStep[] {
  const step = session.step(1);
  const timed: PairedStep[] = [];
  for (let i = 0; i < steps + WARMUP_STEPS; i++) {
    session.setPosition(context);
    const read = readPass();
    const t0 = nowMs();
    mode.run(step, 1);
    timed.push({ ms: nowMs() - t0, read });
  }
  return timed.slice(WARMUP_STEPS);
}

const msOf = (steps: readonly PairedStep[]) => steps.map((s) => s.ms);

/**
 * Rounds of cached steps (each context and mode, then the next round), each step right after a read pass of the
 * memory (src/backends/read-probe.ts ReadTracker): a shared host's read rate flips between two levels within seconds,
 * so each step is held against its bytes at the pass beside it, and a context's ratio is the median over its replayed
 * steps (src/profile/memory-floor.ts, as profile takes it). Where no tracker serves (every step below the knee, or
 * its buffer past 1/16 of free memory) or a step is below the knee, the probe's best pass stands for that context's.
 */
function benchDecode(backend: CpuBackend, session: Session<ModelWeights>, contexts: number[], steps: number): void {
  const cfg = session.config;
  const modes = availableModes(backend, session.modeForm);
  const replay = replayMode(backend);
  const floors = new Map(contexts.map((c) => [c, floorBytes(session, c)]));
  const bytesAt = (c: number) => floors.get(c)!.weights + floors.get(c)!.kv;
  const { report: read, tracker, beside } = measureRead(backend, Math.max(...contexts.map(bytesAt)));
  try {
    const perRound = Math.max(1, Math.ceil(steps / DECODE_ROUNDS));
    const samples = new Map(contexts.map((c) => [c, new Map<LaunchMode, PairedStep[][]>(modes.map((m) => [m, []]))]));
    for (let r = 0; r < DECODE_ROUNDS; r++)
      for (const c of contexts)
        for (const m of modes)
          samples
            .get(c)!
            .get(m)!
            .push(timeCachedSteps(session, c, perRound, m, () => tracker?.pass(bytesAt(c)) ?? null));
    const weights = floors.get(contexts[0]!)!.weights;
    const kind = weights >= read.knee_bytes ? "DRAM floor" : "cache floor";
    // MB as the table's weights column gives them
    line(
      `\ndecode — the cached step ÷ its memory floor (goal ≤ 1.3), ${cfg.name}: ${(weights / 1e6).toFixed(1)} MB of weights`,
    );
    line(`${read.how_measured}${beside}`);
    line(
      `sweep (best pass per size): ${read.sweep.map((p) => `${formatBytes(p.bytes)} ${(p.bytes_per_s / 1e9).toFixed(1)}`).join(", ")} GB/s`,
    );
    line(
      kind === "DRAM floor"
        ? `DRAM floor: the weights (${formatBytes(weights)}) are past the sweep's knee (${formatBytes(read.knee_bytes)}), so memory serves the step`
        : `cache floor, not a DRAM floor: the weights (${formatBytes(weights)}) are below the sweep's knee (${formatBytes(read.knee_bytes)}), so the last-level cache serves part of every step`,
    );
    const pages = pagesLine(session, tracker);
    if (pages) line(pages);
    const replayed = contexts.flatMap((c) => samples.get(c)!.get(replay)!.flat());
    const paired = replayed.filter((s) => s.read !== null).length;
    line(
      `${DECODE_ROUNDS} rounds of ${perRound} steps per context and mode; medians (p10–p90); ` +
        `${paired} of ${replayed.length} ${replay.name} steps after a read pass`,
    );
    line(
      `read GB/s: the median of the passes right before ${replay.name}'s steps, or the probe's best where none were taken; ` +
        `floor ms: the bytes at that rate; ÷ floor: the median over ${replay.name}'s steps of each ÷ its bytes at its pass (the rounds' medians' min–max)`,
    );
    line(
      `context  weights MB  KV MB  read GB/s  floor ms   ${modes.map((m) => `${m.name} ms`.padEnd(24)).join("")}÷ ${kind}`,
    );
    for (const c of contexts) {
      const { weights: w, kv } = floors.get(c)!;
      const rounds = samples.get(c)!.get(replay)!;
      const floor = pointFloor(rounds.flat(), w + kv, read.bytes_per_s);
      const rate = floor.read_bytes_per_s ?? read.bytes_per_s;
      const byRound = summarize(rounds.map((steps) => pointFloor(steps, w + kv, read.bytes_per_s).over_floor));
      const cell = (ms: number[]) => {
        const x = summarize(ms);
        return `${x.median.toFixed(2).padStart(7)} (${x.p10.toFixed(2)}–${x.p90.toFixed(2)})`.padEnd(24);
      };
      line(
        `${String(c).padStart(7)}  ${(w / 1e6).toFixed(1).padStart(10)}  ${(kv / 1e6).toFixed(1).padStart(5)}  ${(rate / 1e9).toFixed(1).padStart(9)}  ${(((w + kv) / rate) * 1e3).toFixed(2).padStart(8)}   ${modes.map((m) => cell(msOf(samples.get(c)!.get(m)!.flat()))).join("")}${floor.over_floor.toFixed(2)} (${byRound.min.toFixed(2)}–${byRound.max.toFixed(2)})`,
      );
    }
  } finally {
    tracker?.close();
  }
}

/** Huge pages apart by more than this share of the resident bytes: the step and its floor are paged unlike. */
const UNLIKE_PAGES = 0.1;

/**
 * How the kernel paged the weights and the read passes' buffer (the library asks for huge pages for both, which read
 * faster here): the step's ratio to its floor compares like with like only where they are paged alike. Null where
 * /proc/self/smaps cannot be read.
 */
function pagesLine(session: Session<ModelWeights>, tracker: ReadTracker | null): string | null {
  const shares = hostPageShares([[session.resident.parameters], tracker ? [tracker.buffer] : []]);
  if (!shares) return null;
  const weights = shares[0]!;
  const passes = tracker ? shares[1]! : null;
  const unlike = passes !== null && Math.abs(hugeShare(weights) - hugeShare(passes)) > UNLIKE_PAGES;
  return (
    `pages: the weights' mappings ${hugeShareText(weights)} in 2 MiB pages` +
    (passes ? `, the read passes' ${hugeShareText(passes)}` : "") +
    " (AnonHugePages ÷ Rss, /proc/self/smaps)" +
    (unlike ? "; paged unlike each other, so the step and its floor are not like for like" : "")
  );
}

/** Starts the competing program and resolves once all its threads spin. */
async function startLoad(threads: number): Promise<Subprocess<"ignore", "pipe", "inherit">> {
  const child = spawn([process.execPath, join(import.meta.dir, "bench-load.ts"), String(threads)], {
    stdin: "ignore",
    stdout: "pipe",
    stderr: "inherit",
  });
  const reader = child.stdout.getReader();
  const { value } = await reader.read();
  reader.releaseLock();
  if (!value || !new TextDecoder().decode(value).includes("ready")) {
    child.kill("SIGKILL");
    throw new UserError(`the competing load (${threads} threads) did not start`);
  }
  return child;
}

async function benchContention(session: Session<ModelWeights>, threads: number, steps: number): Promise<void> {
  const replay = replayMode(session.backend);
  const context = contendContext(session.config);
  const child = await startLoad(threads);
  const quiet: number[] = [];
  const loaded: number[] = [];
  const perRound = Math.max(1, Math.ceil(steps / CONTEND_ROUNDS));
  try {
    // quiet and loaded in alternation: the load is frozen (SIGSTOP) for the quiet steps, not restarted
    for (let r = 0; r < CONTEND_ROUNDS; r++) {
      child.kill("SIGSTOP");
      await Bun.sleep(50);
      quiet.push(...msOf(timeCachedSteps(session, context, perRound, replay)));
      child.kill("SIGCONT");
      await Bun.sleep(50);
      loaded.push(...msOf(timeCachedSteps(session, context, perRound, replay)));
    }
  } finally {
    child.kill("SIGCONT");
    child.kill("SIGKILL");
    await child.exited;
  }
  const q = summarize(quiet),
    l = summarize(loaded);
  line(
    `\ncontention — the cached step at context ${context} while another program runs ${threads} busy thread${threads === 1 ? "" : "s"} (goal ≤ 3× with 2)`,
  );
  line(
    `${CONTEND_ROUNDS} rounds of ${perRound} quiet steps (competitor frozen) and ${perRound} loaded steps, ${replay.name}; medians (p10–p90)`,
  );
  line(`quiet  ${q.median.toFixed(2)} ms (${q.p10.toFixed(2)}–${q.p90.toFixed(2)})`);
  line(`loaded ${l.median.toFixed(2)} ms (${l.p10.toFixed(2)}–${l.p90.toFixed(2)})`);
  line(`slowdown ${(l.median / q.median).toFixed(2)}× (median), ${(l.p90 / q.median).toFixed(2)}× (p90)`);
}

/**
 * Best-of-`PREFILL_REPEATS` ms of each of `runs`, called in turn (so a drift of the machine hits all alike). Each
 * timed call follows an untimed one of the same run, so that every library is timed with its threads awake, as
 * in a prefill's run of ops: ours poll for 20 µs after a call, then sleep, and on this VM a thread that slept through the other
 * library's call took up to ~10 ms to get its vCPU back, as long as the whole 1000 × 768 → 768 product. (OpenBLAS's
 * threads, which by default spin ~0.1 s after a call and took the vCPUs from ours, are told to sleep at once:
 * src/native/openblas.ts.)
 */
function bestMs(...runs: Array<() => void>): number[] {
  const best = runs.map(() => Infinity);
  for (let i = 0; i < PREFILL_REPEATS; i++) {
    runs.forEach((run, k) => {
      run();
      const t0 = nowMs();
      run();
      best[k] = Math.min(best[k]!, nowMs() - t0);
    });
  }
  return best;
}

async function benchPrefill(backend: CpuBackend, cfg: ModelConfig): Promise<void> {
  const peak = backend.measureFp32Peak();
  const blas = openOpenBlas(backend.threads);
  const shapes = familyOf(cfg).linears(cfg);
  const widest = Math.max(...shapes.map(([, IC, OC]) => Math.max(IC, OC)));
  const largest = Math.max(...shapes.map(([, IC, OC]) => IC * OC));
  const maxT = Math.max(...PREFILL_ROWS);
  const floats = (n: number) => {
    const buf = backend.alloc(n * 4);
    backend.upload(
      buf,
      Float32Array.from({ length: n }, (_, i) => Math.sin(i) * 0.5),
    );
    return buf;
  };
  const inp = floats(maxT * widest),
    weight = floats(largest),
    bias = floats(widest),
    out = floats(maxT * widest);
  line(
    `\nprefill — the many-rows linear (out = inp @ W + b, fp32) on ${cfg.name}'s shapes (goal ≤ 1.3× OpenBLAS sgemm)`,
  );
  line(
    `FMA peak: ${(peak / 1e9).toFixed(1)} GFLOP/s (${backend.threads} threads, best of ${FP32_PEAK_PASSES} passes); times are best of ${PREFILL_REPEATS}, ours and OpenBLAS's in turn, each timed call right after an untimed one`,
  );
  line(`OpenBLAS: ${"missing" in blas ? `absent — ${blas.missing}` : blas.config}`);
  line(`${"shape".padEnd(LABEL_WIDTH)}ours GFLOP/s  % peak  OpenBLAS GFLOP/s  ours ÷ OpenBLAS time`);
  for (const T of PREFILL_ROWS) {
    for (const [name, IC, OC] of shapes) {
      const flops = 2 * T * IC * OC;
      const runOurs = () => backend.ops.op_linear(out.ptr, 0, inp.ptr, weight.ptr, bias.ptr, T, IC, OC, DTYPES.f32); // no partials on the CPU
      const [ours, theirs] =
        "missing" in blas
          ? bestMs(runOurs)
          : bestMs(runOurs, () => blas.sgemm(out.ptr, inp.ptr, weight.ptr, T, OC, IC));
      const blasCells =
        theirs === undefined
          ? `${"—".padStart(16)}  —`
          : `${gflops(flops, theirs).toFixed(1).padStart(16)}  ${(ours! / theirs).toFixed(2)}`;
      const label = `${T}×${IC}→${OC} (${name})`.padEnd(LABEL_WIDTH);
      line(
        `${label}${gflops(flops, ours!).toFixed(1).padStart(12)}  ${((100 * gflops(flops, ours!) * 1e9) / peak).toFixed(0).padStart(5)}%  ${blasCells}`,
      );
    }
  }
  if (!("missing" in blas)) blas.close();
  for (const buf of [inp, weight, bias, out]) backend.free(buf);
  benchManyQueryAttention(backend, cfg, peak);
}

/** The uncached step's attention (T queries from position 0, causal), GFLOP/s by the work model's count. */
function benchManyQueryAttention(backend: CpuBackend, cfg: ModelConfig, peak: number): void {
  const H = cfg.n_head;
  const rows = PREFILL_ROWS.filter((T) => T <= cfg.n_positions); // a sequence holds at most n_positions tokens
  const maxCtx = Math.max(...rows); // the cache rows the longest prefill fills
  const [C, kvC, KV] = [H * headDimOf(cfg), kvColumns(cfg), kvHeadsOf(cfg)];
  const past = PREFILL_ROWS.filter((T) => T > cfg.n_positions);
  line(
    `many-query attention (the uncached step's, one layer, FLOPs as the work model counts them)` +
      `${past.length ? `; T = ${past.join(", ")} not run: past ${cfg.name}'s ${cfg.n_positions} positions` : ""}${rows.length ? ":" : "."}`,
  );
  for (const T of rows) {
    const flops = stepWork(cfg, T, 0).find((o) => o.family === "attention")!.flops;
    const qkv = backend.alloc(T * (C + 2 * kvC) * 4),
      kCache = backend.alloc(maxCtx * kvC * 4),
      vCache = backend.alloc(maxCtx * kvC * 4),
      att = backend.alloc(T * C * 4);
    const state = backend.alloc(16);
    backend.upload(
      qkv,
      Float32Array.from({ length: T * (C + 2 * kvC) }, (_, i) => Math.sin(i)),
    );
    backend.upload(state, new Int32Array(4));
    backend.ops.op_kv_append(kCache.ptr, vCache.ptr, qkv.ptr, state.ptr, 1, T, C, kvC, maxCtx, DTYPES.f32);
    const [ms] = bestMs(() =>
      backend.ops.op_attention(
        att.ptr,
        0,
        qkv.ptr,
        kCache.ptr,
        vCache.ptr,
        state.ptr,
        1,
        T,
        C,
        H,
        KV,
        maxCtx,
        DTYPES.f32,
      ),
    );
    line(
      `  T = ${String(T).padEnd(5)} ${gflops(flops, ms!).toFixed(1).padStart(8)} GFLOP/s  ${((100 * gflops(flops, ms!) * 1e9) / peak).toFixed(0).padStart(3)}% of peak`,
    );
    for (const buf of [qkv, kCache, vCache, att, state]) backend.free(buf);
  }
}

async function benchCpu(
  sections: Sections,
  steps: number,
  contextsFlag: string | undefined,
  model: { dir?: string; preset: string },
): Promise<void> {
  // the flags are checked before anything is printed: a bad one is one error line and nothing else
  const modelLines: string[] = [];
  const weights = loadAnyWeights(model.dir, model.preset, 0, (text) => modelLines.push(text));
  const cfg = weights.config;
  const contexts = contextsFor(contextsFlag, cfg);
  if (sections.decode || sections.contend) checkHostMemory(cfg, "f32", undefined, null);
  const backend = CpuBackend.open();
  line(
    `machine: ${backend.deviceName}; date ${new Date().toISOString()}; load average ${load()} (1, 5, 15 min) at the start`,
  );
  for (const text of modelLines) line(text);
  if (sections.decode || sections.contend) {
    const longest = Math.max(...(sections.decode ? contexts : []), sections.contend ? contendContext(cfg) : 0);
    line(`model: ${cfg.name}; prefilling ${longest} tokens…`);
    // a rotary model's sessions hold what the sweep reaches (Llama-3.2-1B's 131,072 positions would not fit)
    const held = familyOf(cfg).rotary ? longest + 1 : cfg.n_positions;
    const session = new Session(backend, weights, { form: DEFAULT_STEP_FORM, maxRows: held, maxContext: held });
    session.prefill(Array.from({ length: longest }, (_, i) => (i * 7919) % cfg.vocab_size));
    if (sections.decode) benchDecode(backend, session, contexts, steps);
    if (sections.contend) await benchContention(session, sections.contend, steps);
    session.close();
  }
  if (sections.prefill) await benchPrefill(backend, cfg);
  line(`\nload average ${load()} at the end`);
  backend.close();
}

/** --contexts (each once, ascending), or the defaults the model holds. */
const contextsFor = (text: string | undefined, cfg: ModelConfig) =>
  text === undefined ? DEFAULT_CONTEXTS.filter((c) => c < cfg.n_positions) : parseContexts(text, cfg);

await runCli(async () => {
  await parseFlags(
    yargs(hideBin(process.argv))
      .scriptName("bun run bench")
      .command(
        "cpu",
        "the CPU backend against this machine's memory floor, under contention, and against OpenBLAS",
        (y) =>
          y
            .option("steps", {
              type: "number",
              default: 30,
              describe: `timed steps per context (decode) and per side (contend), in ${DECODE_ROUNDS} rounds (decode; ${CONTEND_ROUNDS} contend) of equal steps: rounded up to a multiple of the rounds`,
            })
            .option("contexts", {
              type: "string",
              describe: `decode contexts, comma-separated, below the model's n_positions (default ${DEFAULT_CONTEXTS.join(",")})`,
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
            .option("decode", { type: "boolean", describe: "run the decode section" })
            .option("contend", {
              type: "number",
              describe: `run the contention section with N competing threads (all sections: ${DEFAULT_CONTEND_THREADS})`,
            })
            .option("prefill", { type: "boolean", describe: "run the prefill section" }),
        async (a) => {
          const named = a.decode !== undefined || a.contend !== undefined || a.prefill !== undefined;
          const sections: Sections = named
            ? {
                decode: a.decode === true,
                contend: a.contend === undefined ? 0 : intFlag("contend", a.contend, 1, 64),
                prefill: a.prefill === true,
              }
            : { decode: true, contend: DEFAULT_CONTEND_THREADS, prefill: true };
          await benchCpu(sections, intFlag("steps", a.steps, 1), a.contexts, {
            dir: a.model,
            preset: a.preset ?? DEFAULT_PRESET,
          });
        },
      )
      .demandCommand(1, "name a benchmark: cpu"),
  );
});
