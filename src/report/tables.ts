// Terminal tables (PyTorch profiler / Nsight style), unit formatting, and CSV.
import chalk from "chalk";
import type { OpAggregate, StudyMode } from "../profile/types.ts";

/**
 * chalk already turns colour off when stdout is not a TTY and honours FORCE_COLOR; it ignores
 * NO_COLOR, so colour is switched off here when NO_COLOR is set (non-empty) and FORCE_COLOR is not.
 */
export function applyColourPolicy(env: Record<string, string | undefined> = process.env): void {
  if (env.NO_COLOR && env.FORCE_COLOR === undefined) chalk.level = 0;
}
applyColourPolicy();

export type Cell = string | number | null;

export interface Column {
  header: string;
  /** default: right for numbers, left for text */
  align?: "left" | "right";
  /** how a number in this column is written (default: String) */
  format?: (value: number) => string;
  /** longer text is cut with "..." */
  maxWidth?: number;
}

const ELLIPSIS = "...";
const MISSING = "-";

function cellText(cell: Cell, column: Column): string {
  if (cell === null) return MISSING;
  const text = typeof cell === "number" ? (column.format ?? String)(cell) : cell;
  const max = column.maxWidth;
  return max !== undefined && text.length > max
    ? `${text.slice(0, Math.max(0, max - ELLIPSIS.length))}${ELLIPSIS}`
    : text;
}

function pad(text: string, width: number, align: "left" | "right"): string {
  return align === "right" ? text.padStart(width) : text.padEnd(width);
}

/**
 * A table: bold header, a separator, right-aligned numbers, then footer lines under a second separator
 * (e.g. "Self CUDA time total: 4.210 ms").
 */
export function renderTable(
  columns: readonly Column[],
  rows: readonly Cell[][],
  footer: readonly string[] = [],
): string {
  const texts = rows.map((row) => columns.map((c, i) => cellText(row[i] ?? null, c)));
  const widths = columns.map((c, i) => Math.max(c.header.length, ...texts.map((t) => t[i]!.length)));
  const alignOf = (i: number) => columns[i]!.align ?? (rows.some((r) => typeof r[i] === "number") ? "right" : "left");
  const line = (cells: string[]) =>
    cells
      .map((t, i) => pad(t, widths[i]!, alignOf(i)))
      .join("  ")
      .trimEnd();
  const separator = chalk.dim(widths.map((w) => "-".repeat(w)).join("  "));
  const header = chalk.bold(line(columns.map((c) => c.header)));
  const body = [header, separator, ...texts.map(line)];
  return [...body, ...(footer.length > 0 ? [separator, ...footer] : [])].join("\n");
}

/** 412.345 us, 5.210 ms, 1.234 s. */
export function formatDuration(ms: number): string {
  const abs = Math.abs(ms);
  if (abs < 1) return `${(ms * 1000).toFixed(3)} us`;
  if (abs < 1000) return `${ms.toFixed(3)} ms`;
  return `${(ms / 1000).toFixed(3)} s`;
}

const SI_PREFIXES = ["", "k", "M", "G", "T", "P", "E"];

function siScaled(value: number, digits: number): { scaled: number; prefix: string } {
  let scaled = value;
  let i = 0;
  // as printed: 999.96 kB at one decimal reads 1.0 MB, not 1000.0 kB
  while (Math.abs(Number(scaled.toFixed(digits))) >= 1000 && i < SI_PREFIXES.length - 1) {
    scaled /= 1000;
    i++;
  }
  return { scaled, prefix: SI_PREFIXES[i]! };
}

/** Decimal units: 512 B, 98.3 kB, 497.8 MB. */
export function formatBytes(bytes: number): string {
  const { scaled, prefix } = siScaled(bytes, 1);
  return prefix === "" ? `${bytes} B` : `${scaled.toFixed(1)} ${prefix}B`;
}

/** A rate with an SI prefix: 1.23 TFLOP/s, 4.80 TB/s. */
export function formatRate(perSecond: number, unit: "FLOP" | "B"): string {
  const { scaled, prefix } = siScaled(perSecond, 2);
  return `${scaled.toFixed(2)} ${prefix}${unit}/s`;
}

// ---- CSV ---------------------------------------------------------------------------------------

function csvField(cell: Cell): string {
  if (cell === null) return "";
  const text = String(cell);
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** RFC 4180 CSV: a header row, fields quoted when they hold a comma, quote or line break; "\n" line ends. */
export function toCsv(columns: readonly string[], rows: readonly Cell[][]): string {
  return `${[columns, ...rows].map((row) => row.map(csvField).join(",")).join("\n")}\n`;
}

export interface KernelSummary {
  mode: StudyMode;
  context: number;
  /** one row per kernel (or native function) name */
  kernels: OpAggregate[];
}

/** Nsight Systems' cuda_gpu_kern_sum columns, plus Mode and Context. */
export const KERNEL_CSV_COLUMNS = [
  "Time (%)",
  "Total Time (ns)",
  "Instances",
  "Avg (ns)",
  "Med (ns)",
  "Min (ns)",
  "Max (ns)",
  "StdDev (ns)",
  "Name",
  "Mode",
  "Context",
];

const ns = (ms: number) => Math.round(ms * 1e7) / 10; // 0.1 ns resolution

/** kernels.csv: per (mode, context), kernels by total time, descending. */
export function kernelsCsv(summaries: readonly KernelSummary[]): string {
  const rows = summaries.flatMap((s) =>
    s.kernels.map((k): Cell[] => [
      Math.round(k.share * 1000) / 10,
      ns(k.total_ms),
      k.calls,
      ns(k.mean_ms),
      ns(k.median_ms),
      ns(k.min_ms),
      ns(k.max_ms),
      ns(k.stddev_ms),
      k.key,
      s.mode,
      s.context,
    ]),
  );
  return toCsv(KERNEL_CSV_COLUMNS, rows);
}
