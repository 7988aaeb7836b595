// compare.md: the runs, the verdicts, the latency plot, each compared table with its rule, and what was not compared.
import type { Comparison } from "../profile/compare.ts";
import { compareTableData, runsTable, tableHeading, tableNote } from "./compare-tables.ts";
import { OUTPUT_FILES } from "./output-files.ts";
import { markdownTable, mdCell } from "./markdown.ts";

/**
 * The files `bun run compare --out` writes. The plot takes the profile's latency plot's name, so the output
 * folder machinery (which replaces, with --force, only a folder holding a run's files) replaces an earlier comparison.
 */
export const COMPARE_FILES = { report: "compare.md", chart: OUTPUT_FILES.latency, data: "compare.json" } as const;

const section = (title: string, ...body: string[]) =>
  [`## ${mdCell(title)}`, "", ...body.flatMap((b) => [b, ""])].join("\n");

export function renderCompareReport(c: Comparison): string {
  const parts = [
    `# Decode-floor comparison: ${mdCell(c.runs.map((r) => r.label).join(", "))}`,
    "",
    `Every row's reference is the first run that has it (normally ${mdCell(c.runs[0]!.label)}); a ratio is a run's value over the reference's.`,
    "",
    markdownTable(runsTable(c)),
    "",
    section(
      "Verdicts",
      c.verdicts.map((v) => `- ${mdCell(v)}`).join("\n") ||
        "_Nothing to compare: no section holds a row two runs share._",
    ),
    `![Median time per token against context, per run and mode](${COMPARE_FILES.chart})`,
    "",
    ...c.tables.map((t) => section(tableHeading(t), mdCell(tableNote(t, c)), markdownTable(compareTableData(t, c)))),
    ...(c.not_compared.length
      ? [section("Not compared", c.not_compared.map((n) => `- ${mdCell(n.what)}: ${mdCell(n.why)}`).join("\n"))]
      : []),
    section("Commands", ...c.runs.map((r) => `${mdCell(r.label)}:\n\n\`\`\`sh\n${r.command}\n\`\`\``)),
  ];
  return `${parts.join("\n").trimEnd()}\n`;
}
