// Two or more profile runs side by side (bun run compare): per section of the summary, each run's value with
// its spread, its ratio to the first run, and whether the difference is larger than the runs' own spread; what
// cannot be compared, with why; and verdict sentences computed from those numbers. Pure functions over summaries.
import type { LaunchFloor, Peaks, ReadProbeReport } from "../backends/instrument.ts";
import { kvHeadsOf } from "../model/architectures.ts";
import type { Stats } from "../stats.ts";
import type {
  Breakdown,
  DeviceDescription,
  EndToEnd,
  InterventionConfig,
  InterventionPoint,
  InterventionsSection,
  PredictionsSection,
  ProfileSummary,
  StudyMode,
  StudyPoint,
  SeedRow,
} from "./types.ts";
import { ms, NOISE, pct } from "./verdicts.ts";

/** The oldest summary version compare reads: the committed profiles' (profiles/*\/summary.json). */
export const OLDEST_READ_VERSION = 5;

/** What each summary version added to the one before it (the history of types.ts): older runs lack these fields. */
export const FIELDS_ADDED_IN = {
  6: ["device.launch.pdl_node_us", "device.launch.grid_barrier_us", "predictions.launch_parameters"],
  7: [
    "device.launch.grid_barrier_skewed_us",
    "device.launch.grid_barrier_sc_us",
    "device.launch.grid_barrier_sc_skewed_us",
    "points[].breakdown.overlapping_ops",
    "predictions.kernels",
    "predictions.kernels_how",
  ],
  8: [], // model.config may be a Llama-family config; rmsnorm, rope and swiglu op families
  9: ["peers.results[].agreement.parted"],
  10: ["settings.fill", "settings.prefill_flops_per_s", "seed_table[].fill", "seed_table[].uncached_model_ms"],
  11: [
    "interventions.kv_heads",
    "interventions.configs[].kv_heads",
    "interventions.points[].kv_heads",
    "predictions.points[].kv_heads",
    "seed_table[].kv_byte_share",
  ],
  12: ["end_to_end[].ttft_ms", "end_to_end[].tpot_ms", "prompt_cache"],
  13: ["memory.fit", "memory.resident_source", "memory.by_context"],
  14: [
    "device.peaks.read_probe.tracker_bytes",
    "points[].read_bytes_per_s",
    "points[].over_floor",
    "seed_table[].read_bytes_per_s",
    "seed_table[].floor_ms",
    "seed_table[].over_floor",
    "interventions.points[].read_bytes_per_s",
    "interventions.points[].over_floor",
  ],
  15: ["interventions.points[].fill"],
  16: [], // model.config.sliding_window: optional in every version, where a window holds the positions
} as const;

type AddedField = (typeof FIELDS_ADDED_IN)[keyof typeof FIELDS_ADDED_IN][number];
/** The names of the fields later versions added to the object at `parent`. */
type AddedUnder<Parent extends string, F = AddedField> = F extends `${Parent}.${infer Name}` ? Name : never;
type Later<T, Parent extends string> = Omit<T, AddedUnder<Parent>> & Partial<Pick<T, AddedUnder<Parent> & keyof T>>;

/** A summary of any version compare reads (5–16): the current layout, the fields later versions added optional. */
export interface ReadSummary
  extends Omit<
    ProfileSummary,
    | "schema_version"
    | "device"
    | "points"
    | "predictions"
    | "settings"
    | "seed_table"
    | "interventions"
    | "end_to_end"
    | "memory"
  > {
  schema_version: number;
  memory: Later<ProfileSummary["memory"], "memory">;
  end_to_end: Later<EndToEnd, "end_to_end[]">[];
  settings: Later<ProfileSummary["settings"], "settings">;
  seed_table: Later<SeedRow, "seed_table[]">[];
  device: Omit<DeviceDescription, "launch" | "peaks"> & {
    launch: Later<LaunchFloor, "device.launch">;
    peaks: Omit<Peaks, "read_probe"> & { read_probe?: Later<ReadProbeReport, "device.peaks.read_probe"> };
  };
  points: (Omit<Later<StudyPoint, "points[]">, "breakdown"> & { breakdown?: Later<Breakdown, "points[].breakdown"> })[];
  predictions?: Omit<Later<PredictionsSection, "predictions">, "points"> & {
    points: Later<PredictionsSection["points"][number], "predictions.points[]">[];
  };
  interventions?: Omit<Later<InterventionsSection, "interventions">, "points" | "configs"> & {
    configs: Later<InterventionConfig, "interventions.configs[]">[];
    points: Later<InterventionPoint, "interventions.points[]">[];
  };
}

/** The end-to-end times compare shows, the summary field of each (older runs lack the TTFT/TPOT split). */
const END_TO_END_TIMES: { field: "per_token_ms" | "ttft_ms" | "tpot_ms"; label: string }[] = [
  { field: "per_token_ms", label: "per new token" },
  { field: "ttft_ms", label: "to first token" },
  { field: "tpot_ms", label: "per token after the first" },
];

/** The starts the prompt-cache section times, the summary field of each. */
const PROMPT_CACHE_STARTS: { field: "cold_ttft_ms" | "warm_memory_ttft_ms" | "warm_file_ttft_ms"; label: string }[] = [
  { field: "cold_ttft_ms", label: "cold" },
  { field: "warm_memory_ttft_ms", label: "warm, memory" },
  { field: "warm_file_ttft_ms", label: "warm, file" },
];

/** A row's K/V heads: the model's own in a summary from before --kv-heads. */
const kvHeadsIn = (p: { kv_heads?: number }, s: ReadSummary) => p.kv_heads ?? kvHeadsOf(s.model.config);

/** The version that added a field (its path as FIELDS_ADDED_IN writes it), or the oldest read for one every version has. */
function addedIn(path: string): number {
  const entry = Object.entries(FIELDS_ADDED_IN).find(([, paths]) => (paths as readonly string[]).includes(path));
  return entry ? Number(entry[0]) : OLDEST_READ_VERSION;
}

export interface RunInput {
  label: string;
  dir: string;
  summary: ReadSummary;
}

/** A value and its interval; p10 = p90 = median where the summary keeps no spread for it. */
export type Spread = Pick<Stats, "median" | "p10" | "p90">;

/** How a section's interval is had: the ground its "beyond the noise" stands on. */
export type SpreadRule = "p10-p90" | "scaled" | "derived" | "model range" | "none";

export const SPREAD_RULES: Record<SpreadRule, string> = {
  "p10-p90":
    "each run's p10–p90 over its timed steps; a change is beyond the noise where the two runs' intervals do not overlap",
  scaled:
    "the summary keeps no spread per family or per part of the split, so each value gets its point's step interval scaled to it " +
    "(value × p10 ÷ median to value × p90 ÷ median); beyond the noise where the two intervals do not overlap",
  derived:
    "the ratio's interval from the two points' p10–p90 (no cache p10 ÷ KV cache p90 to no cache p90 ÷ KV cache p10); beyond the noise where the intervals do not overlap",
  "model range":
    "measured ÷ the kernel model's range (÷ pessimistic to ÷ optimistic; it holds 1 where the measurement lies inside the range); runs differ where the intervals do not overlap",
  none: `no spread kept: a change under ${pct(NOISE)} is taken as noise`,
};

/** The change of a run against the row's reference: time (lower is better) or another quantity. */
export type Change = "reference" | "faster" | "slower" | "higher" | "lower" | "within noise";

export type KeyPart = string | number;

export interface CompareCell {
  value: Spread;
  /** value ÷ the reference's value; null where the reference is not positive */
  ratio: number | null;
  change: Change;
}

export type SectionId =
  | "step"
  | "families"
  | "split"
  | "seed"
  | "end_to_end"
  | "prompt_cache"
  | "launch"
  | "peers"
  | "interventions"
  | "predictions"
  | "kernel_predictions";

/** One section of one configuration: the runs that share it, one row per key, one cell per run (null: not there). */
export interface CompareTable {
  section: SectionId;
  title: string;
  /** what a value is, with its unit */
  quantity: string;
  unit: "ms" | "us" | "×";
  lower_is_better: boolean;
  rule: SpreadRule;
  /** the shared configuration, e.g. "gpt2 (124,439,808 parameters) · fused · f32/f32"; "" where every run is comparable */
  config: string;
  key_columns: string[];
  /** indices into Comparison.runs; each row's reference is its first run with a value (normally the first) */
  runs: number[];
  rows: { key: KeyPart[]; cells: (CompareCell | null)[] }[];
}

export interface RunDescription {
  label: string;
  dir: string;
  schema_version: number;
  date: string;
  command: string;
  device: string;
  device_detail: Record<string, string | number>;
  backend: string;
  machine: string;
  model: string;
  plan: string;
  storage: string;
  repeats: number;
  warmup: number;
}

export interface Comparison {
  runs: RunDescription[];
  rules: Partial<Record<SpreadRule, string>>;
  tables: CompareTable[];
  verdicts: string[];
  not_compared: { what: string; why: string }[];
}

// ---- what each section measures -------------------------------------------------------------------

interface Measure {
  key: KeyPart[];
  value: Spread;
}

/** The parts of a run's configuration a section's rows depend on: runs are compared only where they all agree. */
type Group = Record<string, string>;

interface Section {
  id: SectionId;
  title: string;
  quantity: string;
  unit: CompareTable["unit"];
  lowerIsBetter: boolean;
  rule: SpreadRule;
  keyColumns: string[];
  group: (s: ReadSummary) => Group;
  measure: (s: ReadSummary) => Measure[];
  /** how many leading key columns name a measured point (the rest name its parts): gaps are listed by point */
  pointColumns: number;
  /** the summary field a row (null: the section) is read from in `s`, where a version newer than the oldest read added it */
  field?: (key: KeyPart[] | null, s: ReadSummary) => string;
}

const modelName = (s: ReadSummary) =>
  `${s.model.config.name} (${s.model.parameters.toLocaleString("en-US")} parameters)`;
const storage = (dtype: string, kv: string) => `${dtype}/${kv}`;
const studyGroup = (s: ReadSummary): Group => ({
  model: modelName(s),
  plan: s.settings.plan,
  storage: storage(s.settings.dtype, s.settings.kv_dtype),
});
const modelPlanGroup = (s: ReadSummary): Group => ({ model: modelName(s), plan: s.settings.plan });
const spreadOf = (x: Stats): Spread => ({ median: x.median, p10: x.p10, p90: x.p90 });
const exact = (v: number): Spread => ({ median: v, p10: v, p90: v });

/** `v` with the interval of `step` scaled to it: a figure of that point with no spread of its own. */
function scaledSpread(v: number, step: Stats): Spread {
  return step.median > 0
    ? { median: v, p10: (v * step.p10) / step.median, p90: (v * step.p90) / step.median }
    : exact(v);
}

/** The order a run's study lists its modes in, the uncached baseline last. */
function modeOrder(s: ReadSummary): (m: StudyMode) => number {
  const cached = s.settings.modes.filter((m) => m !== "uncached");
  return (m) => (m === "uncached" ? cached.length : cached.indexOf(m));
}

function sortedPoints(s: ReadSummary) {
  const order = modeOrder(s);
  return [...s.points].sort((a, b) => order(a.mode) - order(b.mode) || a.context - b.context);
}

const tracedPoints = (s: ReadSummary) =>
  sortedPoints(s).flatMap((p) => (p.breakdown ? [{ ...p, breakdown: p.breakdown }] : []));

/** One value over another, its interval from theirs: the widest the two intervals allow. */
function ratioSpread(over: Spread, under: Spread): Spread {
  return { median: over.median / under.median, p10: over.p10 / under.p90, p90: over.p90 / under.p10 };
}

/** The launch floor's rows, in LaunchFloor's order. */
const LAUNCH_ROWS: { field: keyof Omit<LaunchFloor, "how_measured">; label: string }[] = [
  { field: "host_us", label: "host per empty launch" },
  { field: "device_us", label: "device per empty kernel back to back" },
  { field: "graph_node_us", label: "graph node" },
  { field: "pdl_node_us", label: "graph-pdl node" },
  { field: "grid_barrier_us", label: "grid barrier at once" },
  { field: "grid_barrier_skewed_us", label: "grid barrier skewed" },
  { field: "grid_barrier_sc_us", label: "SC grid barrier at once" },
  { field: "grid_barrier_sc_skewed_us", label: "SC grid barrier skewed" },
];

/** measured ÷ predicted, its interval spanning the model's range. */
const againstModel = (measured: number, predicted: number, optimistic: number, pessimistic: number): Spread => ({
  median: measured / predicted,
  p10: measured / pessimistic,
  p90: measured / optimistic,
});

const SECTIONS: Section[] = [
  {
    id: "step",
    title: "Time per token",
    quantity: "device time per token (ms)",
    unit: "ms",
    lowerIsBetter: true,
    rule: "p10-p90",
    keyColumns: ["mode", "context"],
    pointColumns: 2,
    group: studyGroup,
    measure: (s) => sortedPoints(s).map((p) => ({ key: [p.mode, p.context], value: spreadOf(p.device_ms) })),
  },
  {
    id: "families",
    title: "Time per token by op family",
    quantity: "op time per step (ms)",
    unit: "ms",
    lowerIsBetter: true,
    rule: "scaled",
    keyColumns: ["mode", "context", "op family"],
    pointColumns: 2,
    group: studyGroup,
    measure: (s) =>
      tracedPoints(s).flatMap((p) =>
        p.breakdown.families.map((f) => ({
          key: [p.mode, p.context, f.key],
          value: scaledSpread(f.share * p.breakdown.op_sum_ms, p.device_ms),
        })),
      ),
  },
  {
    id: "split",
    title: "Where a step's time goes",
    quantity: "time per traced step (ms)",
    unit: "ms",
    lowerIsBetter: true,
    rule: "scaled",
    keyColumns: ["mode", "context", "part"],
    pointColumns: 2,
    group: studyGroup,
    measure: (s) =>
      sortedPoints(s).flatMap((p) => {
        const t = p.split;
        if (!t) return [];
        const parts: [string, number][] = [
          ["device busy", t.busy_ms],
          ["device idle", t.idle_ms],
          ["host issue", t.host_issue_ms],
        ];
        if (t.launch_api_ms > 0) parts.push(["launch API", t.launch_api_ms]);
        return parts.map(([part, v]) => ({ key: [p.mode, p.context, part], value: scaledSpread(v, p.device_ms) }));
      }),
  },
  {
    id: "seed",
    title: "KV cache speed-up (no cache ÷ KV cache)",
    quantity: "speed-up (×)",
    unit: "×",
    lowerIsBetter: false,
    rule: "derived",
    keyColumns: ["mode", "context"],
    pointColumns: 2,
    group: studyGroup,
    measure: (s) =>
      sortedPoints(s).flatMap((p) => {
        const uncached = s.points.find((q) => q.mode === "uncached" && q.context === p.context);
        return p.mode === "uncached" || !uncached
          ? []
          : [{ key: [p.mode, p.context], value: ratioSpread(uncached.device_ms, p.device_ms) }];
      }),
  },
  {
    id: "end_to_end",
    title: "End-to-end generation",
    quantity: "time per generated token, to the first token and per token after it (ms)",
    unit: "ms",
    lowerIsBetter: true,
    rule: "none",
    keyColumns: ["mode", "tokens", "time"],
    pointColumns: 2,
    group: studyGroup,
    measure: (s) =>
      s.end_to_end.flatMap((e) =>
        END_TO_END_TIMES.flatMap(({ field, label }) => {
          const v = e[field];
          return v === null || v === undefined
            ? []
            : [{ key: [e.mode, `${e.prompt_tokens} + ${e.new_tokens}`, label], value: exact(v) }];
        }),
      ),
    // a whole point (mode, tokens) a run lacks is the section's; a time within a point it has, that field's
    field: (key) => {
      const time = key && END_TO_END_TIMES.find((t) => t.label === key[2]);
      return time ? `end_to_end[].${time.field}` : "end_to_end";
    },
  },
  {
    id: "prompt_cache",
    title: "Prompt caching: time to first token",
    quantity: "time to first token (ms)",
    unit: "ms",
    lowerIsBetter: true,
    rule: "p10-p90",
    keyColumns: ["prefix tokens", "start"],
    pointColumns: 1,
    group: studyGroup,
    measure: (s) =>
      (s.prompt_cache?.points ?? []).flatMap((p) =>
        PROMPT_CACHE_STARTS.map(({ field, label }) => ({ key: [p.prefix_tokens, label], value: spreadOf(p[field]) })),
      ),
    field: () => "prompt_cache",
  },
  {
    id: "launch",
    title: "Launch floor",
    quantity: "us per empty op",
    unit: "us",
    lowerIsBetter: true,
    rule: "none",
    keyColumns: ["empty op"],
    pointColumns: 1,
    group: () => ({}),
    measure: (s) =>
      LAUNCH_ROWS.flatMap(({ field, label }) => {
        const v = s.device.launch[field];
        return v === null || v === undefined ? [] : [{ key: [label], value: exact(v) }];
      }),
    field: (key) =>
      key === null ? "device.launch" : `device.launch.${LAUNCH_ROWS.find((r) => r.label === key[0])!.field}`,
  },
  {
    id: "peers",
    title: "Peers on the same weights",
    quantity: "time per token (ms)",
    unit: "ms",
    lowerIsBetter: true,
    rule: "p10-p90",
    keyColumns: ["subject", "context"],
    pointColumns: 2,
    group: (s) => ({ model: modelName(s) }),
    measure: (s) =>
      (s.peers?.results ?? []).flatMap((r) =>
        r.points.map((p) => ({ key: [r.short, p.context], value: spreadOf(p.ms) })),
      ),
  },
  {
    id: "interventions",
    title: "Interventions: bytes and batch",
    quantity: "time per step (ms)",
    unit: "ms",
    lowerIsBetter: true,
    rule: "p10-p90",
    keyColumns: ["mode", "weights/KV", "batch", "K/V heads", "context"],
    pointColumns: 5,
    group: modelPlanGroup,
    measure: (s) =>
      (s.interventions?.points ?? []).map((p) => ({
        key: [s.interventions!.mode, storage(p.dtype, p.kv_dtype), p.batch, kvHeadsIn(p, s), p.context],
        value: spreadOf(p.step_ms),
      })),
  },
  {
    id: "predictions",
    title: "Measured against the kernel model's PREDICTIONS",
    quantity: "measured ÷ predicted step (×)",
    unit: "×",
    lowerIsBetter: false,
    rule: "model range",
    keyColumns: ["mode", "weights/KV", "batch", "K/V heads", "context"],
    pointColumns: 5,
    group: modelPlanGroup,
    measure: (s) =>
      (s.predictions?.points ?? []).map((p) => ({
        key: [p.mode, storage(p.dtype, p.kv_dtype), p.batch, kvHeadsIn(p, s), p.context],
        value: againstModel(p.measured_ms, p.predicted_ms, p.optimistic_ms, p.pessimistic_ms),
      })),
  },
  {
    id: "kernel_predictions",
    title: "Traced kernels against the kernel model's PREDICTIONS",
    quantity: "traced ÷ predicted kernel time (×)",
    unit: "×",
    lowerIsBetter: false,
    rule: "model range",
    keyColumns: ["mode", "context", "op family"],
    pointColumns: 2,
    group: modelPlanGroup,
    measure: (s) =>
      (s.predictions?.kernels ?? []).map((k) => ({
        key: [k.mode, k.context, k.family],
        value: againstModel(k.measured_us, k.predicted_us, k.optimistic_us, k.pessimistic_us),
      })),
    // a summary with predictions but none per kernel predates them; one without predictions has none to compare
    field: (_, s) => (s.predictions ? "predictions.kernels" : "predictions"),
  },
];

// ---- comparing one section ------------------------------------------------------------------------

const keyText = (key: KeyPart[]) => key.join(" @ ");
const groupText = (g: Group) => Object.values(g).join(" · ");
const groupId = (g: Group) => JSON.stringify(g);

/** Whether two intervals share a point. */
function overlaps(a: Spread, b: Spread): boolean {
  const [aLo, aHi] = [Math.min(a.p10, a.p90), Math.max(a.p10, a.p90)];
  const [bLo, bHi] = [Math.min(b.p10, b.p90), Math.max(b.p10, b.p90)];
  return aLo <= bHi && bLo <= aHi;
}

function changeOf(value: Spread, ref: Spread, rule: SpreadRule, lowerIsBetter: boolean): Change {
  const same =
    rule === "none" ? Math.abs(value.median - ref.median) < NOISE * Math.abs(ref.median) : overlaps(value, ref);
  if (same) return "within noise";
  const lower = value.median < ref.median;
  return lowerIsBetter ? (lower ? "faster" : "slower") : lower ? "lower" : "higher";
}

function cellsOf(values: (Spread | undefined)[], section: Section): (CompareCell | null)[] {
  const refIndex = values.findIndex((v) => v !== undefined);
  const ref = values[refIndex]!;
  return values.map((value, i) => {
    if (value === undefined) return null;
    if (i === refIndex) return { value, ratio: 1, change: "reference" };
    return {
      value,
      ratio: ref.median > 0 ? value.median / ref.median : null,
      change: changeOf(value, ref, section.rule, section.lowerIsBetter),
    };
  });
}

interface RunMeasures {
  run: number;
  group: Group;
  byKey: Map<string, Measure>;
}

/** Something a section could not compare: its subject (points, a run), under the section's title and configuration. */
interface Note {
  title: string;
  config: string;
  subject: string;
  why: string;
}

/** Notes that differ only in their section merged into one line each: the same points missing from the step, its families, its split. */
function mergedNotes(notes: readonly Note[]): Comparison["not_compared"] {
  const merged = new Map<string, Note & { titles: string[] }>();
  for (const n of notes) {
    const id = JSON.stringify([n.config, n.subject, n.why]);
    const seen = merged.get(id);
    if (seen) seen.titles.push(n.title);
    else merged.set(id, { ...n, titles: [n.title] });
  }
  return [...merged.values()].map((n) => ({
    what: `${n.titles.join("; ")}${n.config ? ` (${n.config})` : ""}: ${n.subject}`,
    why: n.why,
  }));
}

/** Why a run lacks a row (or, with key null, the whole section) that another run has. */
function gapReason(section: Section, run: RunInput, key: KeyPart[] | null): string {
  const field = section.field?.(key, run.summary);
  const since = field === undefined ? OLDEST_READ_VERSION : addedIn(field);
  return run.summary.schema_version < since
    ? `${run.label}'s summary is schema version ${run.summary.schema_version}, older than these fields (version ${since})`
    : key === null
      ? "its summary has none"
      : `not measured in ${run.label}`;
}

/** "mode eager, uncached × context 10, 16" where the keys are every combination of their parts, else the keys themselves. */
function keysText(section: Section, keys: KeyPart[][]): string {
  const columns = section.keyColumns
    .slice(0, keys[0]!.length)
    .map((name, i) => ({ name, values: [...new Set(keys.map((k) => k[i]!))] }));
  const combinations = columns.reduce((n, c) => n * c.values.length, 1);
  return columns.length > 1 && combinations === keys.length && keys.length > 1
    ? columns.map((c) => `${c.name} ${c.values.join(", ")}`).join(" × ")
    : keys.map(keyText).join(", ");
}

/** The points (a key's leading columns) or, within a point a run has, the rows a member of the group lacks, by reason. */
function gapNotes(
  section: Section,
  members: RunMeasures[],
  keys: KeyPart[][],
  runs: readonly RunInput[],
  config: string,
): Note[] {
  const point = (key: KeyPart[]) => key.slice(0, section.pointColumns);
  const byReason = new Map<string, KeyPart[][]>();
  for (const m of members) {
    const points = new Set([...m.byKey.values()].map((x) => keyText(point(x.key))));
    const missing = keys
      .filter((k) => !m.byKey.has(keyText(k)))
      .map((k) => (points.has(keyText(point(k))) ? k : point(k)));
    for (const key of new Map(missing.map((k) => [keyText(k), k])).values()) {
      const why = gapReason(section, runs[m.run]!, key);
      byReason.set(why, [...(byReason.get(why) ?? []), key]);
    }
  }
  return [...byReason].map(([why, missing]) => ({
    title: section.title,
    config,
    subject: keysText(section, missing),
    why,
  }));
}

/** The rows of runs sharing one configuration; a row only one run has is left out, and every gap is listed. */
function tableOf(
  section: Section,
  members: RunMeasures[],
  runs: readonly RunInput[],
): { table: CompareTable | null; notes: Note[] } {
  const keys = new Map<string, KeyPart[]>();
  for (const m of members) for (const [id, { key }] of m.byKey) if (!keys.has(id)) keys.set(id, key);
  const rows = [...keys].flatMap(([id, key]) => {
    const values = members.map((m) => m.byKey.get(id)?.value);
    return values.filter((v) => v !== undefined).length >= 2 ? [{ key, cells: cellsOf(values, section) }] : [];
  });
  const config = groupText(members[0]!.group);
  const notes = gapNotes(section, members, [...keys.values()], runs, config);
  if (!rows.length) return { table: null, notes };
  // a run whose every row only it has gets no column
  const kept = members.map((_, i) => rows.some((r) => r.cells[i] !== null));
  const table: CompareTable = {
    section: section.id,
    title: section.title,
    quantity: section.quantity,
    unit: section.unit,
    lower_is_better: section.lowerIsBetter,
    rule: section.rule,
    config,
    key_columns: section.keyColumns,
    runs: members.filter((_, i) => kept[i]).map((m) => m.run),
    rows: rows.map(({ key, cells }) => ({ key, cells: cells.filter((_, i) => kept[i]) })),
  };
  return { table, notes };
}

/** Why a run's configuration meets no other run's: the parts where it differs from the first run's. */
function differences(own: Group, other: Group): string {
  return Object.keys(own)
    .filter((k) => own[k] !== other[k])
    .map((k) => `${k} ${own[k]} against ${other[k]}`)
    .join(", ");
}

/** A run whose configuration no other run shares, and where it differs from the first run's (or the second's, for the first). */
function loneNote(section: Section, lone: RunMeasures, present: RunMeasures[], runs: readonly RunInput[]): Note {
  const other = present[0] === lone ? present[1]! : present[0]!;
  return {
    title: section.title,
    config: groupText(lone.group),
    subject: runs[lone.run]!.label,
    why: `no other run shares its configuration: ${differences(lone.group, other.group)} of ${runs[other.run]!.label}`,
  };
}

function compareSection(section: Section, runs: readonly RunInput[]): { tables: CompareTable[]; notes: Note[] } {
  const measured: RunMeasures[] = runs.map((r, run) => ({
    run,
    group: section.group(r.summary),
    byKey: new Map(section.measure(r.summary).map((m) => [keyText(m.key), m])),
  }));
  const present = measured.filter((m) => m.byKey.size > 0);
  if (present.length === 0) return { tables: [], notes: [] };
  const notes: Note[] = measured
    .filter((m) => m.byKey.size === 0)
    .map((m) => ({
      title: section.title,
      config: "",
      subject: runs[m.run]!.label,
      why: gapReason(section, runs[m.run]!, null),
    }));
  if (present.length < 2) return { tables: [], notes };
  const groups = new Map<string, RunMeasures[]>();
  for (const m of present) groups.set(groupId(m.group), [...(groups.get(groupId(m.group)) ?? []), m]);
  const tables: CompareTable[] = [];
  for (const members of groups.values()) {
    if (members.length < 2) {
      notes.push(loneNote(section, members[0]!, present, runs));
      continue;
    }
    const result = tableOf(section, members, runs);
    if (result.table) tables.push(result.table);
    notes.push(...result.notes);
  }
  return { tables, notes };
}

// ---- verdicts: sentences from the tables' numbers -------------------------------------------------

/** Three significant digits, as the study's verdicts write times: "0.132 ms", "24.8 ms", "312 ms". */
const signedMs = (x: number) => `${x >= 0 ? "+" : "−"}${ms(Math.abs(x))}`;
const times = (x: number) => `${x.toFixed(2)}×`;

/** The table's reference run (its first) against its `j`th run, on the rows both have. */
interface Pair {
  table: CompareTable;
  ref: RunInput;
  run: RunInput;
  rows: { key: KeyPart[]; ref: Spread; value: Spread; change: Change }[];
}

function pairsOf(table: CompareTable, runs: readonly RunInput[]): Pair[] {
  return table.runs.slice(1).map((run, i) => ({
    table,
    ref: runs[table.runs[0]!]!,
    run: runs[run]!,
    rows: table.rows.flatMap(({ key, cells: [first, ...rest] }) => {
      const cell = rest[i];
      return first && cell ? [{ key, ref: first.value, value: cell.value, change: cell.change }] : [];
    }),
  }));
}

const versus = (p: Pair) => `${p.run.label} vs ${p.ref.label}`;

/** "1.62× faster", "1.10× slower", "1.30×, higher", "the same within the noise (1.01×)". */
function changeClause(ref: Spread, value: Spread, change: Change): string {
  if (change === "faster") return `${times(ref.median / value.median)} faster`;
  if (change === "slower") return `${times(value.median / ref.median)} slower`;
  if (change === "higher" || change === "lower") return `${times(value.median / ref.median)}, ${change}`;
  return `the same within the noise (${times(value.median / ref.median)})`;
}

/** "faster at 2 and within the noise at 1 of 3 contexts". */
function tally(changes: Change[]): string {
  const counts = (["faster", "slower", "within noise"] as const)
    .map((c) => [c, changes.filter((x) => x === c).length] as const)
    .filter(([, n]) => n > 0);
  return `${counts.map(([c, n]) => `${c === "within noise" ? "within the noise" : c} at ${n}`).join(" and ")} of ${changes.length} contexts`;
}

const byContext = <T extends { key: KeyPart[] }>(rows: T[], at: number) =>
  [...rows].sort((a, b) => Number(a.key[at]) - Number(b.key[at]));

/** Per mode: the change at the largest context both runs measured, and across every shared context. */
function stepVerdicts(p: Pair): string[] {
  const modes = [...new Set(p.rows.map((r) => r.key[0]))];
  return modes.map((mode) => {
    const rows = byContext(
      p.rows.filter((r) => r.key[0] === mode),
      1,
    );
    const last = rows[rows.length - 1]!;
    const evidence = `${ms(last.value.median)} against ${ms(last.ref.median)}`;
    const what =
      last.change === "within noise"
        ? `takes the same time within the noise (${evidence}, ${times(last.value.median / last.ref.median)}, p10–p90 overlap)`
        : `is ${changeClause(last.ref, last.value, last.change)} (${evidence}, p10–p90 apart)`;
    const across = rows.length > 1 ? `; ${tally(rows.map((r) => r.change))}` : "";
    return `${versus(p)}: the ${mode} step at context ${last.key[1]} ${what}${across}.`;
  });
}

/** The eager step over the mode the run issues fastest, in both runs, at the largest context both measured them. */
function gapVerdict(p: Pair): string[] {
  const cached = p.rows.filter((r) => r.key[0] !== "uncached");
  for (const eager of byContext(
    cached.filter((r) => r.key[0] === "eager"),
    1,
  ).reverse()) {
    const fastest = cached
      .filter((r) => r.key[1] === eager.key[1] && r.key[0] !== "eager")
      .sort((a, b) => a.value.median - b.value.median)[0];
    if (!fastest) continue;
    const before = ratioSpread(eager.ref, fastest.ref);
    const after = ratioSpread(eager.value, fastest.value);
    const gap = `the eager-vs-${fastest.key[0]} gap at context ${eager.key[1]}`;
    if (overlaps(before, after))
      return [`${versus(p)}: ${gap} is ${times(before.median)} and ${times(after.median)}, the same within the noise.`];
    const grew = after.median > before.median;
    return [
      `${versus(p)}: ${gap} ${grew ? "grew" : "shrank"} from ${times(before.median)} to ${times(after.median)}: launch overhead matters ${grew ? "more" : "less"} in ${p.run.label}.`,
    ];
  }
  return [];
}

/** The KV cache's speed-up per mode at the largest context both runs measured it. */
function seedVerdict(p: Pair): string[] {
  if (!p.rows.length) return [];
  const context = Math.max(...p.rows.map((r) => Number(r.key[1])));
  const here = p.rows.filter((r) => r.key[1] === context);
  const each = here.map(
    (r) =>
      `${r.key[0]} ${times(r.ref.median)} → ${times(r.value.median)}${r.change === "within noise" ? " (within the noise)" : ""}`,
  );
  return [`${versus(p)}: the KV cache's speed-up over no cache at context ${context}: ${each.join(", ")}.`];
}

/** Per mode, at its largest context traced in both runs: the device's idle share of the step. */
function splitVerdict(p: Pair): string[] {
  const busy = p.rows.filter((r) => r.key[2] === "device busy");
  const idleShare = (b: number, i: number) => (b + i > 0 ? Math.max(0, i) / (b + i) : 0);
  const modes = [...new Set(busy.map((r) => r.key[0]))];
  const each = modes.flatMap((mode) => {
    const last = byContext(
      busy.filter((r) => r.key[0] === mode),
      1,
    ).pop()!;
    const idle = p.rows.find((r) => r.key[0] === mode && r.key[1] === last.key[1] && r.key[2] === "device idle");
    if (!idle) return [];
    const [before, after] = [
      idleShare(last.ref.median, idle.ref.median),
      idleShare(last.value.median, idle.value.median),
    ];
    // a step the device is never idle in (the CPU's) has nothing to say here
    return pct(before) === "0%" && pct(after) === "0%"
      ? []
      : [`${pct(before)} → ${pct(after)} of the ${mode} step at context ${last.key[1]}`];
  });
  return each.length ? [`${versus(p)}: the device idles ${each.join(", ")}.`] : [];
}

/** The op family that moved most, in the mode whose op time moved most, at its largest context traced in both runs. */
function familiesVerdict(p: Pair): string[] {
  const modes = [...new Set(p.rows.map((r) => r.key[0]))];
  const cached = modes.filter((m) => m !== "uncached");
  // the decode step's own families first: the uncached baseline only where no cached mode was traced
  const moves = (cached.length ? cached : modes).map((mode) => {
    const context = Math.max(...p.rows.filter((r) => r.key[0] === mode).map((r) => Number(r.key[1])));
    const rows = p.rows.filter((r) => r.key[0] === mode && r.key[1] === context);
    const delta = (r: Pair["rows"][number]) => r.value.median - r.ref.median;
    const top = [...rows].sort((a, b) => Math.abs(delta(b)) - Math.abs(delta(a)))[0]!;
    return { mode, context, top, topDelta: delta(top), total: rows.reduce((a, r) => a + delta(r), 0) };
  });
  const m = moves.sort((a, b) => Math.abs(b.total) - Math.abs(a.total))[0];
  if (!m) return [];
  const noise = m.top.change === "within noise" ? "within the noise" : "beyond the noise";
  return [
    `${versus(p)}, by op family (${m.mode} at context ${m.context}): ${m.top.key[2]} moved most, ${ms(m.top.ref.median)} → ${ms(m.top.value.median)} per step ` +
      `(${signedMs(m.topDelta)} of the ops' ${signedMs(m.total)}; ${noise}).${tracedAgainstTimed(p, m.mode, m.context)}`,
  ];
}

/** Traced steps that moved this much more or less than the timed ones between two runs do not tell the steps' story. */
const TRACED_APART = 1.2;

/**
 * Where the traced steps' op time moved between the runs by a ratio more than TRACED_APART from the timed steps'
 * (the op families come from traced steps, the time per token from untraced ones, run at other moments), a sentence
 * saying so; else nothing.
 */
function tracedAgainstTimed(p: Pair, mode: KeyPart | undefined, context: number): string {
  const at = (r: RunInput) => r.summary.points.find((q) => q.mode === mode && q.context === context);
  const [ref, run] = [at(p.ref), at(p.run)];
  if (!ref?.breakdown || !run?.breakdown) return "";
  const traced = run.breakdown.op_sum_ms / ref.breakdown.op_sum_ms;
  const timed = run.device_ms.median / ref.device_ms.median;
  if (traced / timed <= TRACED_APART && timed / traced <= TRACED_APART) return "";
  return (
    ` The traced steps' op time moved ${times(traced)} where the timed steps moved ${times(timed)}: traced and timed ` +
    "steps ran at other moments (on a shared host, at other speeds of its memory), so the op families and the time per token do not tell one story here."
  );
}

function launchVerdict(p: Pair): string[] {
  const us = (x: number) => `${x.toPrecision(3)} us`;
  const each = p.rows.map(
    (r) =>
      `${r.key[0]} ${us(r.ref.median)} → ${us(r.value.median)} (${times(r.value.median / r.ref.median)}${r.change === "within noise" ? `, within ${pct(NOISE)}` : ""})`,
  );
  return each.length ? [`${versus(p)}, the launch floor: ${each.join("; ")}.`] : [];
}

/** Each peer against the project's fastest mode in both runs, at the largest context the pair shares. */
function peersVerdict(p: Pair): string[] {
  if (!p.rows.length) return [];
  const context = Math.max(...p.rows.map((r) => Number(r.key[1])));
  const ratioTo = (s: ReadSummary, subject: KeyPart) =>
    s.peers?.results.find((r) => r.short === subject)?.points.find((q) => q.context === context)?.ratio_to_best_mode ??
    null;
  const each = p.rows
    .filter((r) => r.key[1] === context)
    .map((r) => {
      const [a, b] = [ratioTo(p.ref.summary, r.key[0]!), ratioTo(p.run.summary, r.key[0]!)];
      const against = a === null || b === null ? "" : `, ${times(a)} → ${times(b)} the project's fastest mode`;
      return `${r.key[0]} ${changeClause(r.ref, r.value, r.change)}${against}`;
    });
  return [`${versus(p)}, peers at context ${context}: ${each.join("; ")}.`];
}

/** What the bytes and the batch did to the step in each run, where both measured the same change. */
function interventionsVerdict(p: Pair): string[] {
  const a = p.ref.summary.interventions?.attribution;
  const b = p.run.summary.interventions?.attribution;
  if (!a || !b || a.context !== b.context) return [];
  const parts: string[] = [];
  if (a.bytes && b.bytes && a.bytes.from === b.bytes.from && a.bytes.to === b.bytes.to) {
    parts.push(
      `${a.bytes.to} instead of ${a.bytes.from} cut the step ${times(a.bytes.time_ratio)} in ${p.ref.label} and ${times(b.bytes.time_ratio)} in ${p.run.label} (bytes ${times(a.bytes.bytes_ratio)})`,
    );
  }
  if (a.batch && b.batch && a.batch.batch === b.batch.batch) {
    parts.push(
      `batch ${a.batch.batch} took ${times(a.batch.token_ratio)} and ${times(b.batch.token_ratio)} a single sequence's time per token (the study's storage types and K/V heads)`,
    );
  }
  return parts.length ? [`${versus(p)}, interventions at context ${a.context}: ${parts.join("; ")}.`] : [];
}

/** Per run: the spread of measured ÷ predicted over its points, and how many lie inside the model's range. */
function predictionsVerdict(table: CompareTable, runs: readonly RunInput[]): string[] {
  const each = table.runs.map((run, j) => {
    const values = table.rows.flatMap((r) => (r.cells[j] ? [r.cells[j]!.value] : []));
    const ratios = values.map((v) => v.median);
    const inside = values.filter((v) => v.p10 <= 1 && 1 <= v.p90).length;
    const [lo, hi] = [Math.min(...ratios), Math.max(...ratios)];
    return `${runs[run]!.label} ${lo === hi ? times(lo) : `${times(lo)}–${times(hi)}`}, ${inside} of ${values.length} inside the model's range`;
  });
  return [`Measured ÷ PREDICTED step (${table.config}): ${each.join("; ")}.`];
}

const PAIR_VERDICTS: Partial<Record<SectionId, (p: Pair) => string[]>> = {
  step: (p) => [...stepVerdicts(p), ...gapVerdict(p)],
  seed: seedVerdict,
  split: splitVerdict,
  families: familiesVerdict,
  launch: launchVerdict,
  peers: peersVerdict,
  interventions: interventionsVerdict,
};

/** Every comparison's verdicts, a pair of runs at a time (in the runs' order), the predictions' after them. */
function verdictsOf(tables: readonly CompareTable[], runs: readonly RunInput[]): string[] {
  const byPair = tables.flatMap((t) => {
    const verdict = PAIR_VERDICTS[t.section];
    return verdict
      ? pairsOf(t, runs).map((p) => ({ order: [runs.indexOf(p.run), runs.indexOf(p.ref)], lines: verdict(p) }))
      : [];
  });
  byPair.sort((a, b) => a.order[0]! - b.order[0]! || a.order[1]! - b.order[1]!); // stable: sections keep their order within a pair
  const predictions = tables.filter((t) => t.section === "predictions").flatMap((t) => predictionsVerdict(t, runs));
  return [...byPair.flatMap((v) => v.lines), ...predictions];
}

// ---- the comparison ---------------------------------------------------------------------------------

function describeRun({ label, dir, summary: s }: RunInput): RunDescription {
  return {
    label,
    dir,
    schema_version: s.schema_version,
    date: s.date,
    command: s.command,
    device: s.device.name,
    device_detail: s.device.detail,
    backend: s.device.backend,
    machine: `${s.machine.hostname} (${s.machine.cpu}, ${s.machine.cpus} CPUs)`,
    model: modelName(s),
    plan: s.settings.plan,
    storage: storage(s.settings.dtype, s.settings.kv_dtype),
    repeats: s.settings.repeats,
    warmup: s.settings.warmup,
  };
}

/** Two or more runs side by side, section by section; the first run is every row's reference where it has the row. */
export function compareRuns(runs: readonly RunInput[]): Comparison {
  if (runs.length < 2) throw new RangeError(`compareRuns: ${runs.length} run(s); a comparison needs two or more`);
  const sections = SECTIONS.map((section) => compareSection(section, runs));
  const tables = sections.flatMap((s) => s.tables);
  const rules = Object.fromEntries([...new Set(tables.map((t) => t.rule))].map((rule) => [rule, SPREAD_RULES[rule]]));
  return {
    runs: runs.map(describeRun),
    rules,
    tables,
    verdicts: verdictsOf(tables, runs),
    not_compared: mergedNotes(sections.flatMap((s) => s.notes)),
  };
}
