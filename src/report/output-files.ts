// The files `bun run profile` writes into its output folder (linked from report.md).
export const OUTPUT_FILES = {
  summary: "summary.json",
  kernels: "kernels.csv",
  trace: "trace.json",
  latency: "latency.svg",
  breakdown: "breakdown.svg",
  traffic: "traffic.svg",
  report: "report.md",
} as const;

/** Charts written only where the run measured what they draw. */
export const OPTIONAL_FILES = {
  /** profile --kv-heads */
  kvHeads: "kv-heads.svg",
  /** where prefixes were timed (by default where the contexts reach 1k; profile --prompt-cache) */
  promptCache: "prompt-cache.svg",
} as const;
