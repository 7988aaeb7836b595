// report.md: the question, the verdicts and the evidence, with links to the other outputs.
import type { ProfileSummary } from "../profile/types.ts";
import { largestContextOf } from "../model/architectures.ts";
import { pastModel } from "../words.ts";
import { OPTIONAL_FILES, OUTPUT_FILES } from "./output-files.ts";
import {
  breakdownPoints,
  END_TO_END_HOW,
  endToEndTable,
  opTimeNote,
  interventionsTable,
  kvHeadsLead,
  kvHeadsTable,
  promptCacheTable,
  kernelPredictionsTable,
  launchParametersTable,
  predictionsTable,
  runLine,
  launchFloorSentence,
  memoryByContextTable,
  memoryFitSentence,
  memoryTable,
  modeLabel,
  peerSentences,
  peersTable,
  questionSentence,
  regimeTable,
  fillSentence,
  seedTable,
  floorSentence,
  sharesOfReadRate,
  notTraced,
  splitHow,
  splitTable,
  topOpsTable,
  withSplit,
  workTable,
  type TableData,
} from "./sections.ts";
import { formatDuration, formatRate, type Cell, type Column } from "./tables.ts";

/** Text from the data, safe in markdown prose: no raw HTML (a device named "<sm_90>" stays visible). */
function md(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

/** Text from the data, safe in a markdown table cell: no raw HTML, no table breaks. */
export function mdCell(text: string): string {
  return md(text).replace(/\|/g, "\\|").replace(/\r?\n/g, " ");
}

export function markdownTable({ columns, rows }: TableData): string {
  const align = (c: Column, i: number) => c.align ?? (rows.some((r) => typeof r[i] === "number") ? "right" : "left");
  const text = (cell: Cell, c: Column) =>
    cell === null ? "–" : typeof cell === "number" ? (c.format ?? String)(cell) : cell;
  return [
    `| ${columns.map((c) => mdCell(c.header)).join(" | ")} |`,
    `|${columns.map((c, i) => (align(c, i) === "right" ? " ---: " : " --- ")).join("|")}|`,
    ...rows.map((r) => `| ${columns.map((c, i) => mdCell(text(r[i] ?? null, c))).join(" | ")} |`),
  ].join("\n");
}

const section = (title: string, ...body: string[]) => [`## ${title}`, "", ...body.flatMap((b) => [b, ""])].join("\n");

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
  const f = { ...OUTPUT_FILES, ...OPTIONAL_FILES };
  const peaks = s.device.peaks;
  const splits = withSplit(s);
  const tops = breakdownPoints(s);
  const parts = [
    `# Decode-floor profile: ${s.model.config.name} on ${s.device.name}`,
    "",
    `**The question.** ${questionSentence(s)}`,
    "",
    section("Verdicts", s.verdicts.map((v) => `- ${v}`).join("\n") || "_No verdicts: nothing was traced._"),
    section(
      "Time per token: no cache vs KV cache",
      "Median device time per generated token; speedup = no cache / KV cache; FLOP reduction = uncached FLOPs / cached FLOPs (work model). " +
        fillSentence(s),
      markdownTable(seedTable(s)),
      floorSentence(s),
      `![Latency per token against context](${f.latency})`,
      "The fastest cached mode's step at each context, split in proportion to the bytes it reads (work model): the weights' share against the K/V cache's.",
      `![A step's time split by the bytes it reads, by context](${f.traffic})`,
    ),
    ...(s.peers
      ? [
          section(
            "Peers: PyTorch and llama.cpp on the same weights",
            `${md(s.peers.method)} Memory floor = the cached step's bytes (work model) at the read bandwidth measured in this run.`,
            markdownTable(peersTable(s)),
            peerSentences(s)
              .map((v) => `- ${md(v)}`)
              .join("\n"),
            s.peers.results
              .map(
                (r) =>
                  `- **${md(r.short)}**: ${md(r.label)}; ${md(r.version)}; ${md(r.device)}; ${md(
                    Object.entries(r.settings)
                      .map(([k, v]) => `${k} ${String(v)}`)
                      .join(", "),
                  )}`,
              )
              .join("\n"),
          ),
        ]
      : []),
    ...(s.interventions
      ? [
          section(
            "Interventions: the bytes and the batch",
            `${md(s.interventions.method)} Regime by the work model: a step whose FLOPs per byte exceed the machine's measured balance ` +
              `(${s.interventions.balance_flop_per_byte.toFixed(1)} FLOP/B: peak FLOP/s ÷ peak B/s) is compute-bound.`,
            markdownTable(interventionsTable(s)),
            `- ${md(s.interventions.attribution.verdict)}`,
          ),
        ]
      : []),
    ...(s.interventions?.kv_heads
      ? [
          section(
            "Grouped-query attention: the K/V heads' saving",
            md(kvHeadsLead(s)),
            markdownTable(kvHeadsTable(s)),
            `- ${md(s.interventions.kv_heads.verdict)}`,
            `![Step time against context per K/V-head variant, crossovers marked](${f.kvHeads})`,
          ),
        ]
      : []),
    ...(s.predictions
      ? [
          section(
            `The kernel model beside the measurements (${md(s.predictions.gpu)})`,
            `PREDICTED figures, not measurements: ${md(s.predictions.how)}. Measured ÷ predicted is what the first run on this GPU calibrates the model by.`,
            markdownTable(predictionsTable(s)),
            `Per kernel: ${md(s.predictions.kernels_how)}.`,
            markdownTable(kernelPredictionsTable(s)),
            "The model's costs per launch and per barrier, its least known parameters, beside this run's measurements with empty kernels " +
              "(a node between empty kernels; in a step the kernels' own ramp and tail come on top):",
            markdownTable(launchParametersTable(s)),
          ),
        ]
      : []),
    section("End-to-end generation", `${END_TO_END_HOW}.`, markdownTable(endToEndTable(s))),
    ...(s.prompt_cache
      ? [
          section(
            "Prompt caching: time to first token, cold and with a kept prefix",
            `${md(s.prompt_cache.how)}.`,
            markdownTable(promptCacheTable(s)),
            `- ${md(s.verdicts.find((v) => v.startsWith("Prompt caching:")) ?? "")}`,
            `![Time to first token against the prefix, cold and warm](${f.promptCache})`,
          ),
        ]
      : []),
    section(
      "Where a step's time goes",
      ...(splits.length > 0
        ? [
            `${splitHow(s)}.`,
            markdownTable(splitTable(s)),
            splits
              .filter((p) => p.split.verdict !== "")
              .map((p) => `- ${p.split.verdict}`)
              .join("\n"),
          ]
        : [`_${notTraced(s)}: no split of a step into busy, idle and issue time._`]),
      `![Time per token by operation](${f.breakdown})`,
    ),
    section(
      "Top operations per mode",
      ...(tops.length > 0 ? [] : [`_${notTraced(s)}: no per-operation times._`]),
      ...tops.map((p) =>
        [
          `**${modeLabel(p.mode)}** at context ${p.context} (op time ${formatDuration(p.breakdown.op_sum_ms)} per step)`,
          opTimeNote(p.breakdown),
          markdownTable(topOpsTable(p.breakdown.families)),
        ]
          .filter(Boolean)
          .join("\n\n"),
      ),
      `Every kernel, per mode and context, with Nsight's columns: [${f.kernels}](${f.kernels}).`,
    ),
    section(
      "Work model vs measured peaks",
      `Peaks: ${formatRate(peaks.flops_per_s, "FLOP")} and ${formatRate(peaks.bytes_per_s, "B")} (${peaks.how_measured}). ` +
        "Work counts a multiply-add as 2 FLOPs and the fewest bytes (each weight, activation and KV cache row once, fp32)." +
        (sharesOfReadRate(s.points)
          ? " Where a point's steps were paired with read passes of the memory, its bytes share is of the read rate beside them (their passes' median), which a shared host's memory moves, not of this peak; above 100% the step read faster than its pass: part of its bytes came from the last-level cache, or the memory sped up."
          : ""),
      launchFloorSentence(s),
      markdownTable(workTable(s)),
      s.regimes.length > 0 ? markdownTable(regimeTable(s)) : `_${notTraced(s)}: no per-kernel regimes._`,
    ),
    section(
      "Memory",
      markdownTable(memoryTable(s)),
      `Measured by: ${s.memory.how_measured}.`,
      s.memory.crossover
        .map(
          (c) =>
            `- batch ${c.batch}: the KV cache held outgrows the weights held (their allocation, not the bytes a step reads) at ${c.context.toLocaleString("en-US")} tokens of context${pastModel(c.context, largestContextOf(s.model.config))}`,
        )
        .join("\n"),
      memoryFitSentence(s),
      "What the study's session held after each context's steps (" +
        `${s.memory.resident_source}; the cache against its formula for the most positions written so far — by any step, fill or check before it, since pages once written stay resident —, and what else grew):`,
      markdownTable(memoryByContextTable(s)),
    ),
    section(
      "Tracing",
      s.tracing.available
        ? `Tracing overhead: ${s.tracing.overhead_pct === null ? "not measured" : `${s.tracing.overhead_pct.toFixed(1).replace(/^-0\.0$/, "0.0")}%`}; dropped records: ${s.tracing.dropped_records}. ${s.tracing.note}`
        : `Tracing was not available: ${s.tracing.note}`,
    ),
    section(
      "Files",
      [
        `- [${f.summary}](${f.summary}): every number above (schema in src/report/schema.ts)`,
        `- [${f.trace}](${f.trace}): host launches and device ops per mode; open it in Perfetto (ui.perfetto.dev) or chrome://tracing`,
        `- [${f.kernels}](${f.kernels}): kernel summary per mode and context`,
        `- ${plotsOf(s)
          .map((plot) => `[${plot}](${plot})`)
          .join(", ")}: the plots`,
      ].join("\n"),
    ),
    section(
      "Run",
      runLine(s),
      `${s.tool.name} ${s.tool.version}; model ${s.model.config.name} (${s.model.parameters.toLocaleString("en-US")} parameters, ${s.model.source}); ` +
        `modes ${s.settings.modes.join(", ")}; contexts ${s.settings.contexts.join(", ")}; ${s.settings.repeats} repeats after ${s.settings.warmup} warm-up.`,
      `\`\`\`sh\n${summary.command}\n\`\`\``,
    ),
  ];
  return `${parts.join("\n").trimEnd()}\n`;
}

/** The plots a run's folder holds: every run's, then the K/V heads' and the prompt cache's where it measured them. */
const plotsOf = (s: ProfileSummary): string[] => [
  OUTPUT_FILES.latency,
  OUTPUT_FILES.breakdown,
  OUTPUT_FILES.traffic,
  ...(s.interventions?.kv_heads ? [OPTIONAL_FILES.kvHeads] : []),
  ...(s.prompt_cache ? [OPTIONAL_FILES.promptCache] : []),
];
