// report.md and the terminal summary, both drawn from a ProfileSummary alone.
import chalk from "chalk";
import type { OpAggregate, PeerResult, ProfileSummary, SeedRow, StudyMode, StudyPoint } from "../profile/types.ts";
import { OUTPUT_FILES } from "./output-files.ts";
import { formatBytes, formatDuration, formatRate, renderTable, type Cell, type Column } from "./tables.ts";

const TOP_OPS = 5;
const BYTES_PER_FLOAT = 4;

export function modeLabel(mode: StudyMode): string {
  return mode === "uncached" ? "no cache" : `KV cache ${mode}`;
}

const fixed = (digits: number) => (v: number) => v.toFixed(digits);
const ms3 = fixed(3);
const times = (v: number | null) => (v === null ? null : `${v.toFixed(1)}×`);
const percent = (share: number) => `${(share * 100).toFixed(1)}%`;

/** The row with the largest context that has both an uncached and a cached time. */
function headlineRow(s: ProfileSummary): SeedRow | undefined {
  const complete = s.seed_table.filter((r) => r.uncached_ms !== null && [r.eager_ms, r.graph_ms, r.native_ms].some((x) => x !== null));
  return complete.sort((a, b) => b.context - a.context)[0];
}

function bestCachedMs(r: SeedRow): number {
  return Math.min(...[r.eager_ms, r.graph_ms, r.native_ms].filter((x): x is number => x !== null));
}

/** The launch floor measured with empty ops, in words. */
export function launchFloorSentence(s: ProfileSummary): string {
  const l = s.device.launch;
  const device = l.device_us === null ? "" : `; back to back the device retires one every ${l.device_us.toFixed(2)} us`;
  const graph = l.graph_node_us === null ? "" : `, and a graph node costs ${l.graph_node_us.toFixed(2)} us`;
  return `Launch floor: an empty op costs ${l.host_us.toFixed(2)} us on the host per call${device}${graph} (${l.how_measured}).`;
}

/** The question, with this run's numbers in it. */
export function questionSentence(s: ProfileSummary): string {
  const r = headlineRow(s);
  if (!r) return "Why does a KV cache remove most of a decode step's FLOPs but much less of its time — is the per-token floor launch overhead?";
  const cached = bestCachedMs(r);
  return (
    `At ${r.context} tokens of context a KV cache does ${r.flop_reduction.toFixed(0)}× fewer FLOPs per token than recomputing the sequence, ` +
    `yet the step is only ${(r.uncached_ms! / cached).toFixed(1)}× faster (${formatDuration(r.uncached_ms!)} → ${formatDuration(cached)}). ` +
    `Is the ~${formatDuration(cached)} per-token floor launch overhead?`
  );
}

// ---- shared table contents (markdown and terminal) ---------------------------------------------

interface TableData {
  columns: Column[];
  rows: Cell[][];
}

function seedTable(s: ProfileSummary): TableData {
  return {
    columns: [
      { header: "context (tokens)" },
      { header: "no cache (ms)", format: ms3 },
      { header: "KV cache eager (ms)", format: ms3 },
      { header: "KV cache graph (ms)", format: ms3 },
      { header: "KV cache eager-native (ms)", format: ms3, align: "right" },
      { header: "speedup eager (×)", align: "right" },
      { header: "speedup graph (×)", align: "right" },
      { header: "FLOP reduction (×)", format: fixed(1) },
    ],
    rows: s.seed_table.map((r) => [r.context, r.uncached_ms, r.eager_ms, r.graph_ms, r.native_ms, times(r.speedup_eager), times(r.speedup_graph), r.flop_reduction]),
  };
}

const withSplit = (s: ProfileSummary) => s.points.filter((p): p is StudyPoint & { split: NonNullable<StudyPoint["split"]> } => p.split !== undefined);

function splitTable(s: ProfileSummary): TableData {
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
export function breakdownPoints(s: ProfileSummary): (StudyPoint & { breakdown: NonNullable<StudyPoint["breakdown"]> })[] {
  const byMode = new Map<StudyMode, StudyPoint & { breakdown: NonNullable<StudyPoint["breakdown"]> }>();
  for (const p of s.points) {
    if (!p.breakdown) continue;
    const seen = byMode.get(p.mode);
    if (!seen || p.context > seen.context) byMode.set(p.mode, { ...p, breakdown: p.breakdown });
  }
  return [...byMode.values()];
}

function topOpsTable(families: OpAggregate[]): TableData {
  return {
    columns: [
      { header: "op family" },
      { header: "calls" },
      { header: "total (ms)", format: ms3 },
      { header: "mean (ms)", format: ms3 },
      { header: "median (ms)", format: ms3 },
      { header: "share (%)", align: "right" },
    ],
    rows: families.slice(0, TOP_OPS).map((f) => [f.key, f.calls, f.total_ms, f.mean_ms, f.median_ms, percent(f.share)]),
  };
}

function workTable(s: ProfileSummary): TableData {
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
      { header: "of peak B/s (%)", align: "right" },
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

function regimeTable(s: ProfileSummary): TableData {
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
    rows: s.regimes.map((r) => [r.family, modeLabel(r.mode), r.context, r.median_us, formatRate(r.flops_per_s, "FLOP"), formatRate(r.bytes_per_s, "B"), r.regime]),
  };
}

function endToEndTable(s: ProfileSummary): TableData {
  return {
    columns: [
      { header: "mode" },
      { header: "prompt tokens" },
      { header: "new tokens" },
      { header: "total (ms)", format: ms3 },
      { header: "per new token (ms)", format: ms3 },
    ],
    rows: s.end_to_end.map((e) => [modeLabel(e.mode), e.prompt_tokens, e.new_tokens, e.total_ms, e.per_token_ms]),
  };
}

function memoryTable(s: ProfileSummary): TableData {
  const m = s.memory;
  return {
    columns: [{ header: "quantity" }, { header: "formula", align: "right" }, { header: "measured", align: "right" }],
    rows: [
      ["weights (parameters × 4 B)", formatBytes(s.model.parameters * BYTES_PER_FLOAT), formatBytes(m.weight_bytes)],
      ["KV cache per token", formatBytes(m.kv_bytes_per_token_formula), formatBytes(m.kv_bytes_per_token_measured)],
      [`KV cache for ${m.kv_cache_tokens} tokens`, formatBytes(m.kv_cache_bytes_formula), formatBytes(m.kv_cache_bytes_measured)],
      ["other allocations (activations, scratch, workspaces)", null, formatBytes(m.workspace_bytes)],
    ],
  };
}

// ---- peers ---------------------------------------------------------------------------------------

const ratio = (v: number | null) => (v === null ? null : `${v.toFixed(2)}×`);
const agreement = (r: PeerResult) => (r.agreement === null ? "not generated" : `${r.agreement.matched}/${r.agreement.of}${r.agreement.agrees ? "" : " DISAGREES"}`);

/** Per context: the project's fastest mode, then each peer subject, with its ratio to that mode and to the memory floor. */
function peersTable(s: ProfileSummary): TableData {
  const results = s.peers?.results ?? [];
  const contexts = [...new Set(results.flatMap((r) => r.points.map((p) => p.context)))].sort((a, b) => a - b);
  const rows = contexts.flatMap((context) => {
    const here = results.flatMap((r) => r.points.filter((p) => p.context === context).map((p) => ({ r, p })));
    const best = here.find(({ p }) => p.best_mode !== null)?.p;
    const own: Cell[][] = best?.best_mode_ms != null
      ? [[`decode-floor ${best.best_mode} (fastest mode)`, context, best.best_mode_ms, null, null, "1.00×", ratio(best.floor_ms === null ? null : best.best_mode_ms / best.floor_ms), "reference"]]
      : [];
    return [...own, ...here.map(({ r, p }): Cell[] => [r.short, context, p.ms.median, p.ms.p10, p.ms.p90, ratio(p.ratio_to_best_mode), ratio(p.ratio_to_floor), agreement(r)])];
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
  const withBest = p.results.flatMap((r) => r.points.filter((q) => q.ratio_to_best_mode !== null).map((q) => ({ r, q })));
  if (withBest.length) {
    const context = Math.max(...withBest.map(({ q }) => q.context));
    const here = withBest.filter(({ q }) => q.context === context);
    const best = here[0]!.q;
    const each = here.map(({ r, q }) => `${r.short} ${ms2(q.ms.median)} (${q.ratio_to_best_mode!.toFixed(2)}× the project's time)`).join(", ");
    const floor = best.floor_ms === null ? "" : `; the memory floor there is ${ms2(best.floor_ms)} (the project at ${(best.best_mode_ms! / best.floor_ms).toFixed(2)}× it)`;
    out.push(`Peers at context ${context}, same weights, same run: the project's fastest mode (${best.best_mode}) takes ${ms2(best.best_mode_ms!)} per token; ${each}${floor}.`);
  }
  const checked = p.results.filter((r) => r.agreement !== null);
  const disagree = checked.filter((r) => !r.agreement!.agrees);
  if (checked.length) {
    const n = p.reference_tokens.length;
    out.push(
      disagree.length === 0
        ? `Greedy tokens: every peer agrees with the project on all ${n} tokens of the prompt.`
        : `Greedy tokens: ${disagree.map((r) => `${r.short} DISAGREES (${r.agreement!.matched}/${n} before the first difference)`).join("; ")}; ` +
            `${checked.length - disagree.length} of ${checked.length} peers agree on all ${n}.`,
    );
  }
  const trace = [...p.torch_dispatch].sort((a, b) => b.context - a.context)[0];
  if (trace) {
    const gpu = trace.unit === "kernel launches";
    const where = gpu
      ? `the host spends ${ms2(trace.host_issue_ms)} issuing ${trace.ops_per_step} kernels (${trace.torch_calls} torch calls); the device is busy ${ms2(trace.busy_ms)} and idle ${ms2(trace.idle_ms)} (${Math.round((100 * trace.idle_ms) / trace.step_ms)}%)`
      : `${trace.torch_calls} torch calls per token; the host spends ${ms2(trace.host_issue_ms)} between them (${Math.round((100 * trace.host_issue_ms) / trace.step_ms)}%, interpreter and dispatch) and ${ms2(trace.busy_ms)} inside them`;
    out.push(`PyTorch seed-style at context ${trace.context}, one step under torch.profiler (${ms2(trace.step_ms)} traced): ${where}.`);
  }
  for (const k of p.skipped) out.push(`Not run: ${k.name}: ${k.reason}.`);
  return out;
}

// ---- markdown ------------------------------------------------------------------------------------

/** Text from the data, safe in markdown prose: no raw HTML (a device named "<sm_90>" stays visible). */
function md(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function mdCell(text: string): string {
  return md(text).replace(/\|/g, "\\|").replace(/\r?\n/g, " ");
}

function markdownTable({ columns, rows }: TableData): string {
  const align = (c: Column, i: number) => c.align ?? (rows.some((r) => typeof r[i] === "number") ? "right" : "left");
  const text = (cell: Cell, c: Column) => (cell === null ? "–" : typeof cell === "number" ? (c.format ?? String)(cell) : cell);
  return [
    `| ${columns.map((c) => mdCell(c.header)).join(" | ")} |`,
    `|${columns.map((c, i) => (align(c, i) === "right" ? " ---: " : " --- ")).join("|")}|`,
    ...rows.map((r) => `| ${columns.map((c, i) => mdCell(text(r[i] ?? null, c))).join(" | ")} |`),
  ].join("\n");
}

const section = (title: string, ...body: string[]) => [`## ${title}`, "", ...body.flatMap((b) => [b, ""])].join("\n");

function runLine(s: ProfileSummary): string {
  const m = s.machine;
  return `${m.hostname} (${m.os}, ${m.cpu}, ${m.cpus} CPUs, ${formatBytes(m.memory_bytes)}, Bun ${m.bun}); device: ${s.device.name} (${s.device.backend}); ${s.date}`;
}

/** Every free text of the summary escaped for markdown (tables escape their own cells). */
function escapedTexts(s: ProfileSummary): ProfileSummary {
  return {
    ...s,
    machine: { ...s.machine, hostname: md(s.machine.hostname), os: md(s.machine.os), cpu: md(s.machine.cpu) },
    device: {
      ...s.device,
      name: md(s.device.name),
      peaks: { ...s.device.peaks, how_measured: md(s.device.peaks.how_measured) },
      launch: { ...s.device.launch, how_measured: md(s.device.launch.how_measured) },
    },
    model: { ...s.model, config: { ...s.model.config, name: md(s.model.config.name) }, source: md(s.model.source) },
    memory: { ...s.memory, how_measured: md(s.memory.how_measured) },
    tracing: { ...s.tracing, note: md(s.tracing.note) },
    verdicts: s.verdicts.map(md),
    points: s.points.map((p) => (p.split ? { ...p, split: { ...p.split, verdict: md(p.split.verdict) } } : p)),
  };
}

/** report.md: the question, the verdicts and the evidence, with links to the other outputs. */
export function renderReport(summary: ProfileSummary): string {
  const s = escapedTexts(summary);
  const f = OUTPUT_FILES;
  const peaks = s.device.peaks;
  const splits = withSplit(s);
  const parts = [
    `# Decode-floor profile: ${s.model.config.name} on ${s.device.name}`,
    "",
    `**The question.** ${questionSentence(s)}`,
    "",
    section("Verdicts", s.verdicts.map((v) => `- ${v}`).join("\n") || "_No verdicts: nothing was traced._"),
    section(
      "Time per token: no cache vs KV cache",
      "Median device time per generated token; speedup = no cache / KV cache; FLOP reduction = uncached FLOPs / cached FLOPs (work model).",
      markdownTable(seedTable(s)),
      `![Latency per token against context](${f.latency})`,
    ),
    ...(s.peers
      ? [section(
        "Peers: PyTorch and llama.cpp on the same weights",
        `${md(s.peers.method)} Memory floor = the cached step's bytes (work model) at the read bandwidth measured in this run.`,
        markdownTable(peersTable(s)),
        peerSentences(s).map((v) => `- ${md(v)}`).join("\n"),
        s.peers.results.map((r) => `- **${md(r.short)}**: ${md(r.label)}; ${md(r.version)}; ${md(r.device)}; ${md(Object.entries(r.settings).map(([k, v]) => `${k} ${String(v)}`).join(", "))}`).join("\n"),
      )]
      : []),
    section("End-to-end generation", markdownTable(endToEndTable(s))),
    section(
      "Where a step's time goes",
      "busy = union of the op intervals on the device; idle = step − busy; host issue = time the host spends issuing the step, of which launch API inside the launch calls.",
      markdownTable(splitTable(s)),
      splits.filter((p) => p.split.verdict !== "").map((p) => `- ${p.split.verdict}`).join("\n"),
      `![Time per token by operation](${f.breakdown})`,
    ),
    section(
      "Top operations per mode",
      ...breakdownPoints(s).map((p) => `**${modeLabel(p.mode)}** at context ${p.context} (op time ${formatDuration(p.breakdown.op_sum_ms)} per step)\n\n${markdownTable(topOpsTable(p.breakdown.families))}`),
      `Every kernel, per mode and context, with Nsight's columns: [${f.kernels}](${f.kernels}).`,
    ),
    section(
      "Work model vs measured peaks",
      `Peaks: ${formatRate(peaks.flops_per_s, "FLOP")} and ${formatRate(peaks.bytes_per_s, "B")} (${peaks.how_measured}). ` +
        "Work counts a multiply-add as 2 FLOPs and the fewest bytes (each weight, activation and KV cache row once, fp32).",
      launchFloorSentence(s),
      markdownTable(workTable(s)),
      s.regimes.length > 0 ? markdownTable(regimeTable(s)) : "_No per-kernel regimes: kernels were not traced._",
    ),
    section(
      "Memory",
      markdownTable(memoryTable(s)),
      `Measured by: ${s.memory.how_measured}.`,
      s.memory.crossover.map((c) => `- batch ${c.batch}: the KV cache outgrows the weights at ${c.context} tokens of context`).join("\n"),
    ),
    section(
      "Tracing",
      s.tracing.available
        ? `Tracing overhead: ${s.tracing.overhead_pct === null ? "not measured" : `${s.tracing.overhead_pct.toFixed(1)}%`}; dropped records: ${s.tracing.dropped_records}. ${s.tracing.note}`
        : `Tracing was not available: ${s.tracing.note}`,
    ),
    section(
      "Files",
      [
        `- [${f.summary}](${f.summary}): every number above (schema in src/report/schema.ts)`,
        `- [${f.trace}](${f.trace}): host launches and device ops per mode; open it in Perfetto (ui.perfetto.dev) or chrome://tracing`,
        `- [${f.kernels}](${f.kernels}): kernel summary per mode and context`,
        `- [${f.latency}](${f.latency}), [${f.breakdown}](${f.breakdown}): the plots`,
      ].join("\n"),
    ),
    section(
      "Run",
      runLine(s),
      `${s.tool.name} ${s.tool.version}; model ${s.model.config.name} (${s.model.parameters.toLocaleString("en-US")} parameters, ${s.model.source}); ` +
        `modes ${s.settings.modes.join(", ")}; contexts ${s.settings.contexts.join(", ")}; ${s.settings.repeats} repeats after ${s.settings.warmup} warm-up.`,
      "```sh\n" + summary.command + "\n```",
    ),
  ];
  return parts.join("\n").trimEnd() + "\n";
}

// ---- terminal ----------------------------------------------------------------------------------

const terminalTable = ({ columns, rows }: TableData, footer: string[] = []) => renderTable(columns, rows, footer);

/** The terminal's summary: the question, the seed table, the time split, top ops and the verdicts. */
export function renderTerminalSummary(s: ProfileSummary): string {
  const heading = (t: string) => chalk.bold.underline(t);
  const tops = breakdownPoints(s).flatMap((p) => [
    heading(`Top operations: ${modeLabel(p.mode)} at context ${p.context}`),
    terminalTable(topOpsTable(p.breakdown.families), [`Op time total per step: ${formatDuration(p.breakdown.op_sum_ms)}`]),
    "",
  ]);
  return [
    chalk.bold(questionSentence(s)),
    "",
    heading("Time per token"),
    terminalTable(seedTable(s)),
    "",
    ...(s.peers ? [heading("Peers: PyTorch and llama.cpp on the same weights"), terminalTable(peersTable(s)), ...peerSentences(s).map((v) => `• ${v}`), ""] : []),
    ...(withSplit(s).length > 0 ? [heading("Where a step's time goes"), terminalTable(splitTable(s)), ""] : []),
    ...tops,
    heading("Verdicts"),
    ...s.verdicts.map((v) => `• ${v}`),
    "",
    chalk.dim(runLine(s)),
    "",
  ].join("\n");
}
