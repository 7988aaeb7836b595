// What report.md and the terminal summary share: the tables' contents and the sentences, drawn from a
// ProfileSummary alone. markdown.ts and terminal.ts lay them out.
import type {
  Breakdown,
  ContextMemory,
  OpAggregate,
  PeerParting,
  PeerResult,
  ProfileSummary,
  SeedRow,
  StudyMode,
  StudyPoint,
} from "../profile/types.ts";
import { kvHeadsOf, largestContextOf } from "../model/architectures.ts";
import { pairedWithReads, SAVING_AT_ONE_READ_RATE } from "../profile/kv-heads-summary.ts";
import { bestCachedMs, flopReductionText, ms } from "../profile/verdicts.ts";
import type { LaunchModeName } from "../run/launch-modes.ts";
import { formatBytes, formatDuration, formatRate, type Cell, type Column } from "./tables.ts";

const TOP_OPS = 5;

export function modeLabel(mode: StudyMode): string {
  return mode === "uncached" ? "no cache" : `KV cache ${mode}`;
}

const fixed = (digits: number) => (v: number) => v.toFixed(digits);
const ms3 = fixed(3);
const times = (v: number | null) => (v === null ? null : `${v.toFixed(1)}×`);
const percent = (share: number) => `${(share * 100).toFixed(1)}%`;

/** The row with the largest context that has both an uncached and a cached time. */
function headlineRow(s: ProfileSummary): SeedRow | undefined {
  const complete = s.seed_table.filter((r) => r.uncached_ms !== null && bestCachedMs(r) !== null);
  return complete.sort((a, b) => b.context - a.context)[0];
}

/** The launch floor measured with empty ops, in words. */
export function launchFloorSentence(s: ProfileSummary): string {
  const l = s.device.launch;
  const device = l.device_us === null ? "" : `; back to back the device retires one every ${l.device_us.toFixed(2)} us`;
  const graph = l.graph_node_us === null ? "" : `; a graph node costs ${l.graph_node_us.toFixed(2)} us`;
  const pdl = l.pdl_node_us === null ? "" : `, a programmatic (graph-pdl) node ${l.pdl_node_us.toFixed(2)} us`;
  const us = (x: number | null) => (x === null ? "–" : x.toFixed(2));
  const barrier =
    l.grid_barrier_us === null
      ? ""
      : `, and a grid barrier of the persistent step ${us(l.grid_barrier_us)} us with every block arriving at once, ` +
        `${us(l.grid_barrier_skewed_us)} us past the last of skewed arrivals (the sequentially consistent design: ${us(l.grid_barrier_sc_us)} and ${us(l.grid_barrier_sc_skewed_us)} us)`;
  return `Launch floor: an empty op costs ${l.host_us.toFixed(2)} us on the host per call${device}${graph}${pdl}${barrier} (${l.how_measured}).`;
}

/** The question, with this run's numbers in it. */
export function questionSentence(s: ProfileSummary): string {
  const r = headlineRow(s);
  if (!r)
    return "Why does a KV cache remove most of a decode step's FLOPs but much less of its time — is the per-token floor launch overhead?";
  const cached = bestCachedMs(r)!;
  const speedup = r.uncached_ms! / cached;
  return (
    `At ${r.context} tokens of context a KV cache does ${flopReductionText(r.flop_reduction)} fewer FLOPs per token than recomputing the sequence, ` +
    `${speedup < r.flop_reduction / 2 ? "yet the step is only" : "and the step is"} ${speedup.toFixed(1)}× faster ` +
    `(${ms(r.uncached_ms!)} → ${ms(cached)}). Is the ~${ms(cached)} per-token floor launch overhead?`
  );
}

export interface TableData {
  columns: Column[];
  rows: Cell[][];
}

/** The cached launch modes the study measured, in its order. */
const cachedModes = (s: ProfileSummary) => s.settings.modes.filter((m): m is LaunchModeName => m !== "uncached");

const contextsPhrase = (list: number[]) => `context${list.length > 1 ? "s" : ""} ${list.join(", ")}`;

/** How the caches were filled and what "work model" in the no-cache column means, in a sentence. */
export function fillSentence(s: ProfileSummary): string {
  const rate = `${(s.settings.prefill_flops_per_s / 1e9).toFixed(1)} GFLOP/s`;
  const synthetic = s.seed_table.filter((r) => r.fill === "synthetic").map((r) => r.context);
  const prefilled = s.seed_table.filter((r) => r.fill === "prefill").map((r) => r.context);
  const modelled = s.seed_table.filter((r) => r.uncached_model_ms !== null).map((r) => r.context);
  return (
    (synthetic.length
      ? `At ${contextsPhrase(synthetic)} the cache was filled synthetically (a short real prefill, the other rows drawn to its distribution; --fill ${s.settings.fill}); elsewhere by a real prefill. `
      : "Every cache was filled by a real prefill. ") +
    (s.settings.fill === "synthetic" && prefilled.length
      ? `${contextsPhrase(prefilled).replace(/^c/, "C")} ${prefilled.length > 1 ? "are" : "is"} no longer than the real prefill a synthetic fill starts with, so ${prefilled.length > 1 ? "they were" : "it was"} prefilled whole. `
      : "") +
    (modelled.length
      ? `The no-cache step was not timed at ${contextsPhrase(modelled)} (it takes more than seconds): its time there is the work model's FLOPs at the prefill rate measured in this run, ${rate}.`
      : "")
  ).trim();
}

/** The uncached step's cell: its time, or the work model's (labelled) where it was not timed. */
const uncachedCell = (r: SeedRow): Cell =>
  r.uncached_ms ?? (r.uncached_model_ms === null ? null : `~${ms3(r.uncached_model_ms)} (work model)`);

/**
 * The seed's table: how the cache was filled, no cache, then one time column and one speedup column per cached
 * launch mode.
 */
export function seedTable(s: ProfileSummary): TableData {
  const modes = cachedModes(s);
  const tracked = s.seed_table.some((r) => r.read_bytes_per_s !== null);
  return {
    columns: [
      { header: "context (tokens)" },
      { header: "cache filled by" },
      { header: "no cache (ms)", format: ms3, align: "right" },
      ...modes.map((m): Column => ({ header: `KV cache ${m} (ms)`, format: ms3, align: "right" })),
      ...modes.map((m): Column => ({ header: `speedup ${m} (×)`, align: "right" })),
      { header: "FLOP reduction (×)", align: "right" },
      { header: "K/V share of bytes", align: "right" },
      { header: "memory floor (ms)", format: ms3, align: "right" },
      ...(tracked ? [{ header: "memory read (GB/s)", format: fixed(1), align: "right" } as Column] : []),
      { header: "fastest ÷ floor", align: "right" },
    ],
    rows: s.seed_table.map((r) => [
      r.context,
      r.fill,
      uncachedCell(r),
      ...modes.map((m) => r.cached[m]?.ms ?? null),
      ...modes.map((m) => times(r.cached[m]?.speedup ?? null)),
      times(r.flop_reduction),
      percent(r.kv_byte_share),
      r.floor_ms,
      ...(tracked ? [r.read_bytes_per_s === null ? null : r.read_bytes_per_s / 1e9] : []),
      r.over_floor === null ? null : `${r.over_floor.toFixed(2)}×`,
    ]),
  };
}

/** Beyond this relative gap, a point's median step against its floor at the passes' median disagrees with its ratio. */
const MIXED_RATES_GAP = 0.1;

/**
 * The contexts whose fastest mode's steps ran at more than one of the memory's speeds: its median step over the floor
 * at its passes' median rate is more than MIXED_RATES_GAP from the median of each step over its own pass's floor.
 * (Both medians agree where the steps and their passes kept to one speed.)
 */
function mixedRates(s: ProfileSummary): string[] {
  return s.seed_table.flatMap((r) => {
    const times = Object.values(r.cached).map((c) => c!.ms);
    if (r.read_bytes_per_s === null || r.over_floor === null || times.length === 0) return [];
    const fastest = Math.min(...times);
    const atMedianRate = fastest / r.floor_ms;
    if (Math.abs(atMedianRate / r.over_floor - 1) <= MIXED_RATES_GAP) return [];
    return [
      `At context ${r.context} the fastest mode's median step (${ms3(fastest)} ms) is ${atMedianRate.toFixed(2)}× the floor at its passes' ` +
        `median rate, where each step against its own pass gives ${r.over_floor.toFixed(2)}×: its steps and passes spanned more than ` +
        "one of the memory's speeds, and the ratio, each step against the rate read right before it, is the one to read.",
    ];
  });
}

/** What the seed table's memory floor is: the bytes at the rate read right before each step, or at the peaks'. */
export function floorSentence(s: ProfileSummary): string {
  const tracked = s.seed_table.some((r) => r.read_bytes_per_s !== null);
  return tracked
    ? [
        "Memory floor = the cached step's bytes (work model) at the memory's read rate: a pass of the memory read right before " +
          "each timed step (scaled to the probe's size), as a shared host's memory can change speed within seconds; memory read = " +
          "the median of the fastest mode's passes; fastest ÷ floor = the median over its steps of each ÷ its bytes at the pass before it.",
        ...mixedRates(s),
      ].join(" ")
    : `Memory floor = the cached step's bytes (work model) at the measured bandwidth, ${formatRate(s.device.peaks.bytes_per_s, "B")}; ` +
        "fastest ÷ floor = the median over the fastest mode's steps of each ÷ that floor." +
        // on the CPU the steps go unpaired where their bytes are under the probe's knee: the last-level cache serves them
        (s.device.backend === "cpu"
          ? " The steps' bytes are under the size past which the memory, not the last-level cache, serves a read (the probe's knee), so this is a cache floor's stand-in, not a DRAM floor: a step can beat it (÷ floor under 1)."
          : "");
}

export const withSplit = (s: ProfileSummary) =>
  s.points.filter((p): p is StudyPoint & { split: NonNullable<StudyPoint["split"]> } => p.split !== undefined);

/** What the split's columns are: of a traced step, not the timed ones of the time-per-token table. */
const SPLIT_HOW =
  "step = the traced step of median length (op timers on: its time is not the time-per-token table's, whose steps run untraced), from its first host or op event to its last; busy = union of the op intervals on the device; idle = step − busy; host issue = time the host spends issuing the step, of which launch API inside the launch calls";

/** How the time split is had; on the CPU, that idle and host issue are one time. */
export const splitHow = (s: ProfileSummary) =>
  s.device.backend === "cpu"
    ? `${SPLIT_HOW}. On the CPU the ops run on the thread that issues them, so idle and host issue are one time, the host's between ops, and no launch API is called`
    : SPLIT_HOW;

/** Why a run has no traced step to split or break down, as the start of a sentence. */
export const notTraced = (s: ProfileSummary) =>
  s.settings.kernels ? "No step of this run was traced op by op" : "No step was traced in this run (--no-kernels)";

export function splitTable(s: ProfileSummary): TableData {
  return {
    columns: [
      { header: "mode" },
      { header: "context (tokens)" },
      { header: "step (ms)", format: ms3 },
      { header: "device busy (ms)", format: ms3 },
      { header: "device idle (ms)", format: ms3 },
      { header: "idle (%)", align: "right" },
      { header: "host issue (ms)", format: ms3 },
      { header: "launch API (ms)", format: ms3 },
    ],
    rows: withSplit(s).map(({ mode, context, split: t }) => [
      modeLabel(mode),
      context,
      t.step_ms,
      t.busy_ms,
      t.idle_ms,
      t.step_ms > 0 ? percent(t.idle_ms / t.step_ms) : null,
      t.host_issue_ms,
      t.launch_api_ms,
    ]),
  };
}

/** Per mode, the traced point with the largest context. */
export function breakdownPoints(
  s: ProfileSummary,
): (StudyPoint & { breakdown: NonNullable<StudyPoint["breakdown"]> })[] {
  const byMode = new Map<StudyMode, StudyPoint & { breakdown: NonNullable<StudyPoint["breakdown"]> }>();
  for (const p of s.points) {
    if (!p.breakdown) continue;
    const seen = byMode.get(p.mode);
    if (!seen || p.context > seen.context) byMode.set(p.mode, { ...p, breakdown: p.breakdown });
  }
  return [...byMode.values()];
}

/** How a traced point's op times were counted, where its ops overlap (graph-pdl); "" where they ran one after another. */
export function opTimeNote(b: Breakdown): string {
  if (b.overlapping_ops === 0) return "";
  return (
    `${b.overlapping_ops} of its ops per step start while the op before them still runs, so a kernel's record includes its wait for ` +
    "the predecessor: each op counts from its predecessor's end to its own end (its marginal cost), and the ops sum to the busy time."
  );
}

export function topOpsTable(families: OpAggregate[]): TableData {
  return {
    columns: [
      { header: "op family" },
      { header: "calls (all traced steps)" },
      { header: "total, all traced steps (ms)", format: ms3 },
      { header: "mean (ms)", format: ms3 },
      { header: "median (ms)", format: ms3 },
      { header: "share (%)", align: "right" },
    ],
    rows: families.slice(0, TOP_OPS).map((f) => [f.key, f.calls, f.total_ms, f.mean_ms, f.median_ms, percent(f.share)]),
  };
}

/** Whether bytes shares are of the read rate beside the steps (any paired with read passes: the CPU), not the peak's. */
export const sharesOfReadRate = (points: readonly { read_bytes_per_s: number | null }[]) =>
  points.some((p) => p.read_bytes_per_s !== null);

/** The bytes-share column's header (sharesOfReadRate). */
const bytesShareHeader = (points: readonly { read_bytes_per_s: number | null }[]) =>
  sharesOfReadRate(points) ? "of the read rate beside it (%)" : "of peak B/s (%)";

export function workTable(s: ProfileSummary): TableData {
  return {
    columns: [
      { header: "mode" },
      { header: "context (tokens)" },
      { header: "GFLOP per token", format: fixed(4) },
      { header: "bytes per token", align: "right" },
      { header: "of which weights", align: "right" },
      { header: "of which KV cache", align: "right" },
      { header: "achieved FLOP/s", align: "right" },
      { header: "of peak FLOP/s (%)", align: "right" },
      { header: "achieved B/s", align: "right" },
      { header: bytesShareHeader(s.points), align: "right" },
      { header: "regime" },
    ],
    rows: s.points.map((p) => [
      modeLabel(p.mode),
      p.context,
      p.work.flops / 1e9,
      formatBytes(p.work.bytes),
      formatBytes(p.work.weight_bytes),
      formatBytes(p.work.kv_bytes),
      formatRate(p.achieved.flops_per_s, "FLOP"),
      percent(p.achieved.flops_share),
      formatRate(p.achieved.bytes_per_s, "B"),
      percent(p.achieved.bytes_share),
      p.achieved.regime,
    ]),
  };
}

export function regimeTable(s: ProfileSummary): TableData {
  return {
    columns: [
      { header: "op family" },
      { header: "mode" },
      { header: "context (tokens)" },
      { header: "per call (us)", format: fixed(2) },
      { header: "FLOP/s", align: "right" },
      { header: "B/s", align: "right" },
      { header: "regime" },
    ],
    rows: s.regimes.map((r) => [
      r.family,
      modeLabel(r.mode),
      r.context,
      r.median_us,
      formatRate(r.flops_per_s, "FLOP"),
      formatRate(r.bytes_per_s, "B"),
      r.regime,
    ]),
  };
}

/** How the end-to-end table's times are had: one generation per mode, so single samples. */
export const END_TO_END_HOW =
  "One generation per mode, after the timed points: the prompt prefilled (recomputed without a cache), then the " +
  "other new tokens back to back; time to first token is that one prefill until its token is known, per token after " +
  "it the mean of the rest — single samples, not medians";

export function endToEndTable(s: ProfileSummary): TableData {
  return {
    columns: [
      { header: "mode" },
      { header: "prompt tokens" },
      { header: "new tokens" },
      { header: "total (ms)", format: ms3 },
      { header: "per new token (ms)", format: ms3 },
      { header: "to first token (ms)", format: ms3 },
      { header: "per token after it (ms)", format: ms3 },
    ],
    rows: s.end_to_end.map((e) => [
      modeLabel(e.mode),
      e.prompt_tokens,
      e.new_tokens,
      e.total_ms,
      e.per_token_ms,
      e.ttft_ms,
      e.tpot_ms,
    ]),
  };
}

export function memoryTable(s: ProfileSummary): TableData {
  const m = s.memory;
  return {
    columns: [{ header: "quantity" }, { header: "formula", align: "right" }, { header: "measured", align: "right" }],
    rows: [
      // as stored: matrices in the storage type, vectors in fp32; allocated: aligned, a rotary model's table after them
      [
        `weights (as stored in ${s.model.dtype}; allocated)`,
        formatBytes(s.model.weight_bytes),
        formatBytes(m.weight_bytes),
      ],
      ["KV cache per token", formatBytes(m.kv_bytes_per_token_formula), formatBytes(m.kv_bytes_per_token_measured)],
      [
        `KV cache for ${m.kv_cache_tokens} tokens`,
        formatBytes(m.kv_cache_bytes_formula),
        formatBytes(m.kv_cache_bytes_measured),
      ],
      [
        "other allocations (library workspaces, beyond the session's weights, cache and activations)",
        null,
        formatBytes(m.workspace_bytes),
      ],
    ],
  };
}

/** The run against the memory it had: what it held at once, and the largest context that would have fit. */
export function memoryFitSentence(s: ProfileSummary): string {
  const f = s.memory.fit;
  const need = f.need.weights + f.need.cache + f.need.activations;
  const byBatch = f.largest_context_by_batch.map((b) => `${b.context} at batch ${b.batch}`).join(", ");
  return (
    `The run held at most ${formatBytes(need)} at once (weights ${formatBytes(f.need.weights)}, K/V cache ` +
    `${formatBytes(f.need.cache)}, activations ${formatBytes(f.need.activations)}) of ${formatBytes(f.free_bytes)} free ` +
    `(${f.free_source}); it would have fitted up to context ${f.largest_context}, the model's session alone up to ${byBatch}.`
  );
}

/** Regions other than the weights and the cache: the activations' (the attention's scratch among them). */
const besideCache = (regions: ContextMemory["regions"]) =>
  regions.filter((r) => r.name !== "weights" && r.name !== "cache");

/** The regions whose resident bytes grew by more than a page from `first` to `now`, with how much. */
function grewSince(first: ContextMemory, now: ContextMemory): string {
  const PAGE = 4096;
  const grew = now.regions
    .map((r) => ({
      name: r.name,
      by: r.resident_bytes - (first.regions.find((q) => q.name === r.name)?.resident_bytes ?? 0),
    }))
    .filter((g) => g.by > PAGE)
    .sort((a, b) => b.by - a.by);
  return grew.length ? grew.map((g) => `${g.name} +${formatBytes(g.by)}`).join(", ") : "nothing";
}

/** Per context run: the cache's resident bytes against the formula, and what else the session holds. */
export function memoryByContextTable(s: ProfileSummary): TableData {
  const rows = s.memory.by_context;
  return {
    columns: [
      { header: "context", align: "right" },
      { header: "K/V positions written so far", align: "right" },
      { header: "K/V formula", align: "right" },
      { header: "K/V held", align: "right" },
      { header: "held ÷ formula", align: "right" },
      { header: "activations held", align: "right" },
      { header: `grew since context ${rows[0]?.context ?? "–"}` },
    ],
    rows: rows.map((r) => [
      r.context,
      r.kv_positions,
      formatBytes(r.kv_bytes_formula),
      formatBytes(r.kv_bytes_resident),
      r.kv_bytes_formula > 0 ? `${(r.kv_bytes_resident / r.kv_bytes_formula).toFixed(3)}×` : null,
      formatBytes(besideCache(r.regions).reduce((sum, g) => sum + g.resident_bytes, 0)),
      grewSince(rows[0]!, r),
    ]),
  };
}

/** The machine and device of the run, in one line. */
export function runLine(s: ProfileSummary): string {
  const m = s.machine;
  return `${m.hostname} (${m.os}, ${m.cpu}, ${m.cpus} CPUs, ${formatBytes(m.memory_bytes)}, Bun ${m.bun}); device: ${s.device.name} (${s.device.backend}); ${s.date}`;
}

// ---- peers ---------------------------------------------------------------------------------------

const ratio = (v: number | null) => (v === null ? null : `${v.toFixed(2)}×`);
const agreement = (r: PeerResult) => {
  if (r.agreement === null) return "not generated";
  const { matched, of, agrees, parted } = r.agreement;
  if (agrees) return `${matched}/${of}`;
  return `${matched}/${of} DISAGREES${parted ? ` (its token our #${parted.rank}, ${parted.margin.toPrecision(2)} below)` : ""}`;
};

/** A runner-up this close below the project's token (relative to the largest logit) is called a near-tie. */
const NEAR_TIE_MARGIN = 1e-3;

/** Where a peer parts from the project, as the project's logits there see the peer's token. */
function partingSentence(p: PeerParting | null): string {
  if (!p) return "";
  const tie = p.rank === 2 && p.margin <= NEAR_TIE_MARGIN;
  return (
    `; there the project's logits rank its token #${p.rank}, ${p.margin.toPrecision(2)} of the largest logit below the project's` +
    (tie ? `: a near-tie (the runner-up within ${NEAR_TIE_MARGIN} of it), which another summation order may flip` : "")
  );
}

/** Per context: the project's fastest mode, then each peer subject, with its ratio to that mode and to the memory floor. */
export function peersTable(s: ProfileSummary): TableData {
  const results = s.peers?.results ?? [];
  const contexts = [...new Set(results.flatMap((r) => r.points.map((p) => p.context)))].sort((a, b) => a - b);
  const rows = contexts.flatMap((context) => {
    const here = results.flatMap((r) => r.points.filter((p) => p.context === context).map((p) => ({ r, p })));
    const best = here.find(({ p }) => p.best_mode !== null)?.p;
    const own: Cell[][] =
      best?.best_mode_ms != null
        ? [
            [
              `decode-floor ${best.best_mode} (fastest mode)`,
              context,
              best.best_mode_ms,
              null,
              null,
              "1.00×",
              ratio(best.floor_ms === null ? null : best.best_mode_ms / best.floor_ms),
              "reference",
            ],
          ]
        : [];
    return [
      ...own,
      ...here.map(({ r, p }): Cell[] => [
        r.short,
        context,
        p.ms.median,
        p.ms.p10,
        p.ms.p90,
        ratio(p.ratio_to_best_mode),
        ratio(p.ratio_to_floor),
        agreement(r),
      ]),
    ];
  });
  return {
    columns: [
      { header: "subject" },
      { header: "context (tokens)" },
      { header: "median (ms)", format: ms3 },
      { header: "p10 (ms)", format: ms3 },
      { header: "p90 (ms)", format: ms3 },
      { header: "× project's fastest", align: "right" },
      { header: "× memory floor", align: "right" },
      { header: "greedy tokens agree" },
    ],
    rows,
  };
}

const ms2 = (x: number) => formatDuration(x);

/** The project's ratio to each peer at the largest context they share, agreement, PyTorch's dispatch split, what did not run. */
export function peerSentences(s: ProfileSummary): string[] {
  const p = s.peers;
  if (!p) return [];
  const out: string[] = [];
  const withBest = p.results.flatMap((r) =>
    r.points.filter((q) => q.ratio_to_best_mode !== null).map((q) => ({ r, q })),
  );
  if (withBest.length) {
    const context = Math.max(...withBest.map(({ q }) => q.context));
    const here = withBest.filter(({ q }) => q.context === context);
    const best = here[0]!.q;
    const each = here
      .map(({ r, q }) => `${r.short} ${ms2(q.ms.median)} (${q.ratio_to_best_mode!.toFixed(2)}× the project's time)`)
      .join(", ");
    const floor =
      best.floor_ms === null
        ? ""
        : `; the memory floor there is ${ms2(best.floor_ms)} (the project at ${(best.best_mode_ms! / best.floor_ms).toFixed(2)}× it)`;
    out.push(
      `Peers at context ${context}, same weights, same run: the project's fastest mode (${best.best_mode}) takes ${ms2(best.best_mode_ms!)} per token; ${each}${floor}.`,
    );
  }
  const checked = p.results.filter((r) => r.agreement !== null);
  const disagree = checked.filter((r) => !r.agreement!.agrees);
  if (checked.length) {
    const n = p.reference_tokens.length;
    out.push(
      disagree.length === 0
        ? `Greedy tokens: every peer agrees with the project on all ${n} tokens generated after the prompt.`
        : `Greedy tokens: ${disagree.map((r) => `${r.short} DISAGREES (${r.agreement!.matched}/${n} before the first difference${partingSentence(r.agreement!.parted)})`).join("; ")}; ` +
            `${checked.length - disagree.length} of ${checked.length} peers agree on all ${n} generated.`,
    );
  }
  const trace = [...p.torch_dispatch].sort((a, b) => b.context - a.context)[0];
  if (trace) {
    const gpu = trace.unit === "kernel launches";
    const where = gpu
      ? `the host spends ${ms2(trace.host_issue_ms)} issuing ${trace.ops_per_step} kernels (${trace.torch_calls} torch calls); the device is busy ${ms2(trace.busy_ms)} and idle ${ms2(trace.idle_ms)} (${Math.round((100 * trace.idle_ms) / trace.step_ms)}%)`
      : `${trace.torch_calls} torch calls per token; the host spends ${ms2(trace.host_issue_ms)} between them (${Math.round((100 * trace.host_issue_ms) / trace.step_ms)}%, interpreter and dispatch) and ${ms2(trace.busy_ms)} inside them`;
    out.push(
      `PyTorch seed-style at context ${trace.context}, one step under torch.profiler (${ms2(trace.step_ms)} traced): ${where}.`,
    );
  }
  for (const k of p.skipped) out.push(`Not run: ${k.name}: ${k.reason}.`);
  return out;
}

// ---- interventions ---------------------------------------------------------------------------------

/** Per configuration (storage types, batch, K/V heads where they were varied) and context: time per step and per token against bytes per token. */
export function interventionsTable(s: ProfileSummary): TableData {
  const points = s.interventions?.points ?? [];
  // the K/V heads shown where any configuration has other than the model's own; the fill where any was synthetic
  const varied = points.some((p) => p.kv_heads !== kvHeadsOf(s.model.config));
  const synthetic = points.some((p) => p.fill === "synthetic");
  return {
    columns: [
      { header: "weights" },
      { header: "KV cache" },
      { header: "batch" },
      ...(varied ? [{ header: "K/V heads" }] : []),
      { header: "context (tokens)" },
      ...(synthetic ? [{ header: "fill" }] : []),
      { header: "step (ms)", format: ms3 },
      { header: "per token (ms)", format: ms3 },
      { header: "bytes per token", align: "right" },
      { header: "FLOP per byte", format: fixed(2) },
      { header: "achieved B/s", align: "right" },
      { header: bytesShareHeader(points), align: "right" },
      { header: "regime (work model)" },
    ],
    rows: points.map((p) => [
      p.dtype,
      p.kv_dtype,
      p.batch,
      ...(varied ? [p.kv_heads] : []),
      p.context,
      ...(synthetic ? [p.fill] : []),
      p.step_ms.median,
      p.token_ms,
      formatBytes(p.bytes_per_token),
      p.intensity,
      formatRate(p.achieved.bytes_per_s, "B"),
      percent(p.achieved.bytes_share),
      p.achieved.regime,
    ]),
  };
}

const tokensOrNone = (n: number | null) => (n === null ? "not measured" : Math.round(n).toLocaleString("en-US"));

/** The K/V-head section's lead: what a saving compares (at one read rate where the steps were paired), how a crossover is found. */
export function kvHeadsLead(s: ProfileSummary): string {
  const i = s.interventions;
  if (!i?.kv_heads) return "";
  return (
    "Each K/V-head variant's step against the one with the most heads, at the largest context" +
    (pairedWithReads(i.points) ? `: ${SAVING_AT_ONE_READ_RATE}` : "") +
    ". The bytes saved (work model) are the cache's and the K and V projections' weights, which fewer heads shrink too" +
    `. The crossover: ${i.kv_heads.crossover_how}`
  );
}

/** Per K/V-head variant, storage types and batch: the step's saving against the most heads (measured, by the bytes), and the crossover (by the bytes, measured). */
export function kvHeadsTable(s: ProfileSummary): TableData {
  const k = s.interventions?.kv_heads;
  if (!k) return { columns: [], rows: [] };
  const longest = largestContextOf(s.model.config);
  const alike = (c: (typeof k.crossovers)[number]) =>
    k.savings.filter((v) => v.dtype === c.dtype && v.kv_dtype === c.kv_dtype && v.batch === c.batch);
  const saving = (c: (typeof k.crossovers)[number]) => alike(c).find((v) => v.kv_heads === c.kv_heads);
  // the reference's own step, which each of its variants' savings is against
  const reference = (c: (typeof k.crossovers)[number]) => {
    const ms = alike(c)[0]?.reference_ms;
    return ms === undefined ? "(reference)" : `${ms.toFixed(3)} (reference)`;
  };
  return {
    columns: [
      { header: "K/V heads" },
      { header: "weights/KV" },
      { header: "batch" },
      {
        header: `step at ${k.savings[0]?.context ?? "-"}${pairedWithReads(s.interventions!.points) ? ", at one read rate" : ""} (ms)`,
        align: "right",
      },
      { header: `saved vs ${k.variants[0]} heads`, align: "right" },
      { header: "saved by the bytes", align: "right" },
      { header: "saved ÷ bytes", align: "right" },
      { header: "crossover by the bytes (tokens)", align: "right" },
      { header: "crossover measured (tokens)", align: "right" },
    ],
    rows: k.crossovers.map((c) => {
      const v = saving(c);
      return [
        c.kv_heads,
        `${c.dtype}/${c.kv_dtype}`,
        c.batch,
        v ? v.step_ms.toFixed(3) : reference(c),
        v ? percent(v.saved) : "-",
        v ? percent(v.formula_saved) : "-",
        v?.saved_over_formula == null ? "-" : v.saved_over_formula.toFixed(2),
        `${tokensOrNone(c.formula_context)}${c.formula_context > longest ? ` (past its ${longest.toLocaleString("en-US")})` : ""}`,
        tokensOrNone(c.measured_context),
      ];
    }),
  };
}

// ---- the kernel model's predictions beside the measurements -----------------------------------------

/** The model's launch parameters (PREDICTED leads) beside what this run measured of them. */
export function launchParametersTable(s: ProfileSummary): TableData {
  return {
    columns: [
      { header: "parameter" },
      { header: "model (us)", format: fixed(2) },
      { header: "model range (us)", align: "right" },
      { header: "measured here (us)", format: fixed(2) },
    ],
    rows: (s.predictions?.launch_parameters ?? []).map((p) => [
      p.parameter,
      p.model_us,
      `${p.low_us.toFixed(1)}–${p.high_us.toFixed(1)}`,
      p.measured_us,
    ]),
  };
}

/** Per traced point whose kernels ran one after another and op family: the model's PREDICTED kernel time per step beside the traced one. */
export function kernelPredictionsTable(s: ProfileSummary): TableData {
  return {
    columns: [
      { header: "mode" },
      { header: "context (tokens)" },
      { header: "op family" },
      { header: "kernels per step" },
      { header: "traced (us)", format: fixed(2) },
      { header: "PREDICTED (us)", format: fixed(2) },
      { header: "predicted range (us)", align: "right" },
      { header: "traced ÷ predicted", format: fixed(2) },
    ],
    rows: (s.predictions?.kernels ?? []).map((k) => [
      k.mode,
      k.context,
      k.family,
      k.calls,
      k.measured_us,
      k.predicted_us,
      `${k.optimistic_us.toFixed(2)}–${k.pessimistic_us.toFixed(2)}`,
      k.measured_over_predicted,
    ]),
  };
}

/** Per measured cached point: the kernel model's PREDICTED step (working estimate and range) and the measured one. */
export function predictionsTable(s: ProfileSummary): TableData {
  return {
    columns: [
      { header: "mode" },
      { header: "context (tokens)" },
      { header: "weights · cache" },
      { header: "batch" },
      { header: "measured (ms)", format: ms3 },
      { header: "PREDICTED (ms)", format: ms3 },
      { header: "predicted range (ms)", align: "right" },
      { header: "measured ÷ predicted", format: fixed(2) },
    ],
    rows: (s.predictions?.points ?? []).map((p) => [
      p.mode,
      p.context,
      `${p.dtype} · ${p.kv_dtype}`,
      p.batch,
      p.measured_ms,
      p.predicted_ms,
      `${p.optimistic_ms.toFixed(3)}–${p.pessimistic_ms.toFixed(3)}`,
      p.measured_over_predicted,
    ]),
  };
}

/** Time to first token cold against a kept prefix, per prefix length (where any were timed). */
export function promptCacheTable(s: ProfileSummary): TableData {
  const c = s.prompt_cache;
  if (!c) return { columns: [], rows: [] };
  const sooner = (cold: number, warm: number) => `${(cold / warm).toFixed(1)}×`;
  return {
    columns: [
      { header: "prefix tokens" },
      { header: "K/V kept" },
      { header: "cold TTFT (ms)", format: ms3 },
      { header: "warm, memory (ms)", format: ms3 },
      { header: "warm, file (ms)", format: ms3 },
      { header: "cold ÷ memory", align: "right" },
      { header: "cold ÷ file", align: "right" },
      { header: "same tokens" },
    ],
    rows: c.points.map((p) => [
      p.prefix_tokens,
      formatBytes(p.bytes_kept),
      p.cold_ttft_ms.median,
      p.warm_memory_ttft_ms.median,
      p.warm_file_ttft_ms.median,
      sooner(p.cold_ttft_ms.median, p.warm_memory_ttft_ms.median),
      sooner(p.cold_ttft_ms.median, p.warm_file_ttft_ms.median),
      p.streams_identical ? "yes" : "NO",
    ]),
  };
}
