// Writes every output of a profile run into one folder: summary.json, kernels.csv, trace.json, the
// charts and report.md.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { kernelSummaries } from "../profile/aggregate.ts";
import type { ProfileSummary, StepTrace } from "../profile/types.ts";
import { breakdownChart, kvHeadsChart, latencyChart, promptCacheChart, trafficChart } from "./charts.ts";
import { renderReport } from "./markdown.ts";
import { OPTIONAL_FILES, OUTPUT_FILES } from "./output-files.ts";
import { validateSummary } from "./schema.ts";
import { kernelsCsv } from "./tables.ts";
import { buildProfileTrace, validateTrace } from "./trace.ts";

export interface WrittenOutputs {
  paths: string[];
  /** where summary.json breaks its schema: a defect of this tool */
  summaryProblems: string[];
  /** where trace.json breaks what Perfetto needs (e.g. records a tracer delivered broken) */
  traceProblems: string[];
}

/**
 * Writes the outputs into `dir` (the K/V-head and prompt-cache charts where the run measured them) (created if missing) and returns their paths with what
 * validation found in the summary and the trace; every file is written first, so a problem can be inspected.
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
  const kvHeads = kvHeadsChart(summary);
  const promptCache = promptCacheChart(summary);
  const contents: [string, string][] = [
    [OUTPUT_FILES.summary, `${JSON.stringify(summary, null, 2)}\n`],
    [OUTPUT_FILES.kernels, kernelsCsv(kernelSummaries(steps))],
    [OUTPUT_FILES.trace, JSON.stringify(trace)],
    [OUTPUT_FILES.latency, latencyChart(summary)],
    [OUTPUT_FILES.breakdown, breakdownChart(summary)],
    [OUTPUT_FILES.traffic, trafficChart(summary)],
    ...(kvHeads === null ? [] : [[OPTIONAL_FILES.kvHeads, kvHeads] as [string, string]]),
    ...(promptCache === null ? [] : [[OPTIONAL_FILES.promptCache, promptCache] as [string, string]]),
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
