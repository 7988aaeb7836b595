import { describe, expect, test } from "bun:test";
import chalk from "chalk";
import { kernelSummaries } from "../src/profile/aggregate.ts";
import {
  applyColourPolicy,
  formatBytes,
  formatDuration,
  formatRate,
  KERNEL_CSV_COLUMNS,
  kernelsCsv,
  renderTable,
  toCsv,
} from "../src/report/tables.ts";
import { syntheticSteps } from "./helpers/synthetic-profile.ts";
import { withoutColour } from "./helpers/expect.ts";

withoutColour();

describe("renderTable", () => {
  test("header, separator, right-aligned numbers, cut names, missing values and a footer", () => {
    const table = renderTable(
      [{ header: "Name", maxWidth: 12 }, { header: "Calls" }, { header: "Total (ms)", format: (v) => v.toFixed(3) }],
      [
        ["matmul_forward_kernel", 12, 1.5],
        ["gelu", 1, null],
      ],
      ["Self CUDA time total: 1.500 ms"],
    );
    expect(table.split("\n")).toEqual([
      "Name          Calls  Total (ms)",
      "------------  -----  ----------",
      "matmul_fo...     12       1.500",
      "gelu              1           -",
      "------------  -----  ----------",
      "Self CUDA time total: 1.500 ms",
    ]);
  });

  test("colours the header when colour is on", () => {
    chalk.level = 1;
    try {
      expect(renderTable([{ header: "A" }], [["x"]])).toContain("\u001b[1mA");
    } finally {
      chalk.level = 0;
    }
  });
});

describe("applyColourPolicy", () => {
  test("NO_COLOR turns colour off unless FORCE_COLOR is set", () => {
    chalk.level = 2;
    applyColourPolicy({ NO_COLOR: "1", FORCE_COLOR: "1" });
    expect(chalk.level).toBe(2);
    applyColourPolicy({});
    expect(chalk.level).toBe(2);
    applyColourPolicy({ NO_COLOR: "1" });
    expect(chalk.level as number).toBe(0);
  });
});

describe("formatting", () => {
  test("durations auto-scale with 3 decimals", () => {
    expect(formatDuration(0.412345)).toBe("412.345 us");
    expect(formatDuration(5.21)).toBe("5.210 ms");
    expect(formatDuration(1234.5)).toBe("1.234 s");
    expect(formatDuration(0)).toBe("0.000 us");
  });

  test("bytes in decimal units", () => {
    expect(formatBytes(512)).toBe("512 B");
    expect(formatBytes(98_304)).toBe("98.3 kB");
    expect(formatBytes(497_759_232)).toBe("497.8 MB");
    expect(formatBytes(141e9)).toBe("141.0 GB");
  });

  test("a value that rounds up to 1000 takes the next prefix", () => {
    expect(formatBytes(999_960)).toBe("1.0 MB");
    expect(formatBytes(999_949)).toBe("999.9 kB");
    expect(formatBytes(999)).toBe("999 B");
    expect(formatRate(999.996e9, "B")).toBe("1.00 TB/s");
    expect(formatRate(999.994e9, "B")).toBe("999.99 GB/s");
  });

  test("rates with SI prefixes", () => {
    expect(formatRate(1.234e12, "FLOP")).toBe("1.23 TFLOP/s");
    expect(formatRate(4.8e12, "B")).toBe("4.80 TB/s");
    expect(formatRate(12, "B")).toBe("12.00 B/s");
  });
});

describe("CSV", () => {
  test("quotes commas, quotes and line breaks; leaves nulls empty", () => {
    expect(
      toCsv(
        ["a", "b,c"],
        [
          ["x", 1],
          ['say "hi"', null],
          ["two\nlines", 2.5],
        ],
      ),
    ).toBe('a,"b,c"\nx,1\n"say ""hi""",\n"two\nlines",2.5\n');
  });

  test("kernels.csv has Nsight's columns, ns values and per-mode rows", () => {
    const csv = kernelsCsv(kernelSummaries(syntheticSteps()));
    const lines = csv.trimEnd().split("\n");
    expect(KERNEL_CSV_COLUMNS).toHaveLength(11);
    expect(lines[0]).toBe(
      "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name,Mode,Context",
    );
    // eager at context 4: 2 steps × 2 layers × 4 linear ops, 2000 ns each
    const linear = lines.find((l) => l.includes(",linear_kernel,eager,4"))!;
    expect(linear.split(",").slice(1, 8)).toEqual(["32000", "16", "2000", "2000", "2000", "2000", "0"]);
    const shares = lines.filter((l) => l.endsWith(",eager,4")).map((l) => Number(l.split(",")[0]));
    expect(shares.reduce((a, b) => a + b, 0)).toBeCloseTo(100, 0);
  });
});
