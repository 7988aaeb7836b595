// Writes every output of a profile run into one folder: summary.json, kernels.csv, trace.json,
// latency.svg, breakdown.svg and report.md.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { kernelSummaries } from "../profile/aggregate.ts";
import type { ProfileSummary, StepTrace } from "../profile/types.ts";
import { renderReport } from "./markdown.ts";
import { breakdownPoints, modeLabel } from "./sections.ts";
import { OUTPUT_FILES } from "./output-files.ts";
import { validateSummary } from "./schema.ts";
import { lineChart, stackedBars, type BarSegment, type LineSeries } from "./svg.ts";
import { kernelsCsv } from "./tables.ts";
import { buildProfileTrace, validateTrace } from "./trace.ts";

function caption(s: ProfileSummary, note = ""): string {
  return `${s.machine.hostname} (${s.machine.cpu}) · ${s.device.name} · ${s.date}${note}`;
}

/** Median time per token against context, one line per mode, and the FLOP ratio on a second axis. */
export function latencyChart(s: ProfileSummary): string {
  const onAxis = (context: number) => context > 0;
  const series: LineSeries[] = s.settings.modes
    .map((mode) => ({
      name: modeLabel(mode),
      points: s.points
        .filter((p) => p.mode === mode && onAxis(p.context))
        .map((p) => ({ x: p.context, y: p.device_ms.median })),
    }))
    .filter((line) => line.points.length > 0);
  // the peers beside them, dotted: the same contexts, the same weights, the same run
  for (const r of s.peers?.results ?? []) {
    const points = r.points.filter((p) => onAxis(p.context)).map((p) => ({ x: p.context, y: p.ms.median }));
    if (points.length) series.push({ name: r.short, points, dotted: true });
  }
  series.push({
    name: "FLOP ratio (right axis)",
    axis: "right",
    points: s.seed_table.filter((r) => onAxis(r.context)).map((r) => ({ x: r.context, y: r.flop_reduction })),
  });
  const dropped = s.points.some((p) => !onAxis(p.context)) ? " · context 0 not shown (log axis)" : "";
  return lineChart({
    title: `Decode step time per token vs context: ${s.model.config.name}`,
    xTitle: "context (tokens already in the sequence, log2 scale)",
    yTitle: "median device time per token (ms, log scale)",
    yLog: true,
    y2Title: "FLOP ratio, no cache / KV cache (×)",
    series,
    caption: caption(s, dropped),
  });
}

/** One bar per mode at its largest traced context: time per token by op family, plus the device's idle time. */
export function breakdownChart(s: ProfileSummary): string {
  const traced = breakdownPoints(s);
  const bars = traced.map((p) => {
    const segments: BarSegment[] = p.breakdown.families.map((f) => ({
      key: f.key,
      value: f.share * p.breakdown.op_sum_ms,
    }));
    if (p.split) segments.push({ key: "device idle", value: Math.max(0, p.split.idle_ms) });
    return { label: `${modeLabel(p.mode)} @ ${p.context}`, segments };
  });
  const untraced = s.points
    .filter((p) => !traced.some((t) => t.mode === p.mode))
    .filter((p, _, all) => p.context === Math.max(...all.filter((q) => q.mode === p.mode).map((q) => q.context)))
    .map((p) => ({
      label: `${modeLabel(p.mode)} @ ${p.context}`,
      segments: [{ key: "not traced (total)", value: p.device_ms.median }],
    }));
  return stackedBars({
    title: `Where a token's step goes, by operation: ${s.model.config.name}`,
    yTitle: "time per token (ms)",
    bars: [...bars, ...untraced],
    caption: caption(s),
  });
}

export interface WrittenOutputs {
  paths: string[];
  /** where summary.json breaks its schema: a defect of this tool */
  summaryProblems: string[];
  /** where trace.json breaks what Perfetto needs (e.g. records a tracer delivered broken) */
  traceProblems: string[];
}

/**
 * Writes the six outputs into `dir` (created if missing) and returns their paths with what validation
 * found in the summary and the trace; every file is written first, so a problem can be inspected.
 */
export function writeProfileOutputs(dir: string, summary: ProfileSummary, steps: readonly StepTrace[]): WrittenOutputs {
  mkdirSync(dir, { recursive: true });
  const trace = buildProfileTrace(steps, {
    backend: summary.device.backend,
    run: {
      tool: `${summary.tool.name} ${summary.tool.version}`,
      command: summary.command,
      date: summary.date,
      hostname: summary.machine.hostname,
      device: summary.device.name,
      model: summary.model.config.name,
    },
  });
  const contents: [string, string][] = [
    [OUTPUT_FILES.summary, `${JSON.stringify(summary, null, 2)}\n`],
    [OUTPUT_FILES.kernels, kernelsCsv(kernelSummaries(steps))],
    [OUTPUT_FILES.trace, JSON.stringify(trace)],
    [OUTPUT_FILES.latency, latencyChart(summary)],
    [OUTPUT_FILES.breakdown, breakdownChart(summary)],
    [OUTPUT_FILES.report, renderReport(summary)],
  ];
  const paths = contents.map(([name, text]) => {
    const path = join(dir, name);
    writeFileSync(path, text);
    return path;
  });
  return {
    paths,
    summaryProblems: validateSummary(summary).map((p) => `${OUTPUT_FILES.summary} ${p}`),
    traceProblems: validateTrace(trace).map((p) => `${OUTPUT_FILES.trace}: ${p}`),
  };
}
