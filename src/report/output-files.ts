// The files `bun run profile` writes into its output folder (linked from report.md).
export const OUTPUT_FILES = {
  summary: "summary.json",
  kernels: "kernels.csv",
  trace: "trace.json",
  latency: "latency.svg",
  breakdown: "breakdown.svg",
  report: "report.md",
} as const;
