// The comparison's tables (what the terminal and compare.md show) and its terminal layout: the runs, one table
// per compared section and configuration, what could not be compared, and the verdicts.
import chalk from "chalk";

import type { CompareCell, CompareTable, Comparison } from "../profile/compare.ts";
import type { TableData } from "./sections.ts";
import { renderTable, type Cell, type Column } from "./tables.ts";

/** Sections with many rows per point: shown at each mode's largest context (--json keeps every row). */
const AT_LARGEST_CONTEXT: ReadonlySet<CompareTable["section"]> = new Set(["families", "split", "kernel_predictions"]);

/** The rows a table shows: all of them, or for the sections above the rows at each mode's largest context. */
export function shownRows(t: CompareTable): CompareTable["rows"] {
  if (!AT_LARGEST_CONTEXT.has(t.section)) return t.rows;
  const largest = new Map<string, number>();
  for (const { key } of t.rows) largest.set(String(key[0]), Math.max(largest.get(String(key[0])) ?? 0, Number(key[1])));
  return t.rows.filter(({ key }) => Number(key[1]) === largest.get(String(key[0])));
}

/** The line under a table's heading: what its values are, and what "beyond the noise" means for them. */
export function tableNote(t: CompareTable, c: Comparison): string {
  const shown =
    shownRows(t).length < t.rows.length
      ? ` Shown at each mode's largest context (${t.rows.length} rows in --json).`
      : "";
  const rule = c.rules[t.rule] ?? "";
  return `${t.quantity}${t.rule === "none" ? "" : ", median (p10–p90)"}; ${rule}.${shown}`;
}

export const tableHeading = (t: CompareTable) => `${t.title}${t.config ? ` · ${t.config}` : ""}`;

function valueText(t: CompareTable, cell: CompareCell): string {
  const digits = t.unit === "×" ? 2 : 3;
  const { median, p10, p90 } = cell.value;
  const interval =
    p10 === median && p90 === median
      ? ""
      : ` (${Math.min(p10, p90).toFixed(digits)}–${Math.max(p10, p90).toFixed(digits)})`;
  return `${median.toFixed(digits)}${interval}`;
}

/** "0.61× faster", "1.02× within noise"; the row's reference is "reference". */
function changeText(cell: CompareCell | null): Cell {
  if (!cell) return null;
  return cell.ratio === null || cell.change === "reference" ? cell.change : `${cell.ratio.toFixed(2)}× ${cell.change}`;
}

const keyHeader = (name: string) => (name === "context" ? "context (tokens)" : name);

/** Key columns, each run's value with its interval, then each later run's ratio to the first and its change. */
export function compareTableData(t: CompareTable, c: Comparison): TableData {
  const label = (run: number) => c.runs[run]!.label;
  const [first, ...later] = t.runs;
  const columns: Column[] = [
    ...t.key_columns.map((name): Column => ({ header: keyHeader(name) })),
    ...t.runs.map((run): Column => ({ header: `${label(run)} (${t.unit})`, align: "right" })),
    ...later.map(
      (run): Column => ({
        header: `${later.length > 1 ? `${label(run)} ` : ""}vs ${first === 0 ? "first" : label(first!)}`,
      }),
    ),
  ];
  const rows = shownRows(t).map(({ key, cells }): Cell[] => [
    ...key,
    ...cells.map((cell) => (cell ? valueText(t, cell) : null)),
    ...cells.slice(1).map(changeText),
  ]);
  return { columns, rows };
}

/** The device details that tell runs apart at a glance (every one is in --json): the CPU's threads, the GPU's architecture and SMs. */
const SHOWN_DETAIL = ["threads", "compute_capability", "sms", "sm_clock_mhz"];

const shownDetail = (detail: Record<string, string | number>) =>
  SHOWN_DETAIL.filter((k) => detail[k] !== undefined)
    .map((k) => `${k} ${detail[k]}`)
    .join(", ");

/** One row per run: where it came from and what it measured. */
export function runsTable(c: Comparison): TableData {
  return {
    columns: [
      { header: "run" },
      { header: "folder" },
      { header: "device" },
      { header: "device detail" },
      { header: "machine" },
      { header: "model · plan · weights/KV" },
      { header: "summary version" },
      { header: "repeats (warm-up)" },
      { header: "date" },
    ],
    rows: c.runs.map((r) => [
      r.label,
      r.dir,
      r.device,
      shownDetail(r.device_detail),
      r.machine,
      `${r.model} · ${r.plan} · ${r.storage}`,
      r.schema_version,
      `${r.repeats} (${r.warmup})`,
      r.date,
    ]),
  };
}

const terminalTable = ({ columns, rows }: TableData) => renderTable(columns, rows);

/** The terminal's comparison: the runs, each compared table with its rule, what was not compared, and the verdicts. */
export function renderCompareTerminal(c: Comparison): string {
  const heading = (t: string) => chalk.bold.underline(t);
  const tables = c.tables.flatMap((t) => [
    heading(tableHeading(t)),
    chalk.dim(tableNote(t, c)),
    terminalTable(compareTableData(t, c)),
    "",
  ]);
  const notCompared = c.not_compared.length
    ? [heading("Not compared"), ...c.not_compared.map((n) => `• ${n.what}: ${n.why}`), ""]
    : [];
  return [
    heading(`Comparing ${c.runs.length} runs (the first is each row's reference)`),
    terminalTable(runsTable(c)),
    "",
    ...tables,
    ...notCompared,
    heading("Verdicts"),
    ...(c.verdicts.length
      ? c.verdicts.map((v) => `• ${v}`)
      : ["• nothing to compare: no section holds a row two runs share"]),
    "",
  ].join("\n");
}
