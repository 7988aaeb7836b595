// The terminal's summary of a profile: the question, the seed table, end-to-end generation, the time split, top ops
// and the verdicts.
import chalk from "chalk";

import type { ProfileSummary } from "../profile/types.ts";
import {
  breakdownPoints,
  END_TO_END_HOW,
  endToEndTable,
  interventionsTable,
  kvHeadsTable,
  promptCacheTable,
  opTimeNote,
  predictionsTable,
  modeLabel,
  peerSentences,
  peersTable,
  questionSentence,
  runLine,
  seedTable,
  floorSentence,
  splitHow,
  splitTable,
  topOpsTable,
  withSplit,
  type TableData,
} from "./sections.ts";
import { formatDuration, renderTable } from "./tables.ts";

const terminalTable = ({ columns, rows }: TableData, footer: string[] = []) => renderTable(columns, rows, footer);

/** The terminal's summary: the question, the seed table, end-to-end generation, the time split, top ops, verdicts. */
export function renderTerminalSummary(s: ProfileSummary): string {
  const heading = (t: string) => chalk.bold.underline(t);
  const tops = breakdownPoints(s).flatMap((p) => [
    heading(`Top operations: ${modeLabel(p.mode)} at context ${p.context}`),
    terminalTable(
      topOpsTable(p.breakdown.families),
      [`Op time total per step: ${formatDuration(p.breakdown.op_sum_ms)}`, opTimeNote(p.breakdown)].filter(Boolean),
    ),
    "",
  ]);
  return [
    chalk.bold(questionSentence(s)),
    "",
    heading("Time per token"),
    terminalTable(seedTable(s), [floorSentence(s)]),
    "",
    ...(s.peers
      ? [
          heading("Peers: PyTorch and llama.cpp on the same weights"),
          terminalTable(peersTable(s)),
          ...peerSentences(s).map((v) => `• ${v}`),
          "",
        ]
      : []),
    ...(s.predictions
      ? [
          heading(`The kernel model's PREDICTIONS beside the measurements (${s.predictions.gpu})`),
          terminalTable(predictionsTable(s)),
          "",
        ]
      : []),
    ...(s.interventions
      ? [
          heading(`Interventions: bytes and batch (${s.interventions.mode} mode)`),
          terminalTable(interventionsTable(s)),
          "",
        ]
      : []),
    ...(s.interventions?.kv_heads
      ? [heading("Grouped-query attention: the K/V heads' saving"), terminalTable(kvHeadsTable(s)), ""]
      : []),
    heading("End-to-end generation"),
    terminalTable(endToEndTable(s), [`${END_TO_END_HOW}.`]),
    "",
    ...(s.prompt_cache
      ? [heading("Prompt caching: time to first token, cold and warm"), terminalTable(promptCacheTable(s)), ""]
      : []),
    ...(withSplit(s).length > 0
      ? [heading("Where a step's time goes"), terminalTable(splitTable(s), [`${splitHow(s)}.`]), ""]
      : []),
    ...tops,
    heading("Verdicts"),
    ...s.verdicts.map((v) => `• ${v}`),
    "",
    chalk.dim(runLine(s)),
    "",
  ].join("\n");
}
