// bun run compare RUN_DIR RUN_DIR … — profile runs side by side (two machines, before and after a change): per
// mode × context × configuration each run's median and p10–p90, its ratio to the first run, whether the difference
// is beyond the runs' own spread, what cannot be compared and why, and verdicts; tables, --json, or --out DIR.
import { existsSync, realpathSync, statSync, writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";

import yargs from "yargs";
import { hideBin } from "yargs/helpers";

import { runCli, UserError } from "../errors.ts";
import { readSmallTextFile } from "../model/files.ts";
import {
  compareRuns,
  OLDEST_READ_VERSION,
  type Comparison,
  type ReadSummary,
  type RunInput,
} from "../profile/compare.ts";
import { SCHEMA_VERSION } from "../profile/types.ts";
import { COMPARE_FILES, renderCompareReport } from "../report/compare-markdown.ts";
import { validateSummaryVersion } from "../report/compare-schema.ts";
import { compareChart } from "../report/compare-svg.ts";
import { renderCompareTerminal } from "../report/compare-tables.ts";
import { OUTPUT_FILES } from "../report/output-files.ts";
import { parseFlags } from "./common.ts";
import { checkOutFolder, type OutputKind, ProfileOutput, writeStdout } from "./outputs.ts";

/** Far above any summary.json a profile writes (hundreds of kB): a larger file is not one. */
const MAX_SUMMARY_BYTES = 256 * 2 ** 20;

/** The run folder's summary.json, parsed and checked against its version's schema; every failure one line. */
function readSummary(dir: string): ReadSummary {
  if (!existsSync(dir)) throw new UserError(`${dir}: no such folder`);
  if (!statSync(dir).isDirectory())
    throw new UserError(
      `${dir} is not a folder: give the folder a profile run wrote (it holds ${OUTPUT_FILES.summary})`,
    );
  const path = join(dir, OUTPUT_FILES.summary);
  if (!existsSync(path)) throw new UserError(`${dir} holds no ${OUTPUT_FILES.summary}: not a profile run`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(readSmallTextFile(path, MAX_SUMMARY_BYTES));
  } catch (e) {
    if (e instanceof UserError) throw e;
    throw new UserError(`${path} is not JSON: ${(e as Error).message}`);
  }
  const version = (parsed as { schema_version?: unknown } | null)?.schema_version;
  if (typeof version !== "number" || !Number.isInteger(version))
    throw new UserError(`${path} has no integer schema_version: not a decode-floor summary`);
  if (version < OLDEST_READ_VERSION || version > SCHEMA_VERSION) {
    throw new UserError(
      `${path} is schema version ${version}; compare reads versions ${OLDEST_READ_VERSION} to ${SCHEMA_VERSION}${version > SCHEMA_VERSION ? " (a newer decode-floor wrote it)" : ""}`,
    );
  }
  const problems = validateSummaryVersion(parsed, version);
  if (problems.length)
    throw new UserError(
      `${path} breaks schema version ${version} (${problems.length} problem${problems.length > 1 ? "s" : ""}, first: ${problems[0]})`,
    );
  return parsed as ReadSummary;
}

/** The runs' labels: --labels, else each folder's name (the folders as given where two names clash). */
function labelsFor(dirs: readonly string[], given: string | undefined): string[] {
  if (given === undefined) {
    const names = dirs.map((d) => basename(resolve(d)));
    return new Set(names).size === names.length ? names : [...dirs];
  }
  const labels = given.split(",").map((l) => l.trim());
  if (labels.length !== dirs.length)
    throw new UserError(
      `--labels names ${labels.length} run${labels.length === 1 ? "" : "s"}, but ${dirs.length} run folders are given`,
    );
  if (labels.some((l) => l === "")) throw new UserError("--labels: a label is empty");
  if (new Set(labels).size !== labels.length) throw new UserError("--labels: every run needs its own label");
  return labels;
}

function readRuns(dirs: readonly string[], labels: string | undefined): RunInput[] {
  if (dirs.length < 2)
    throw new UserError(
      `compare needs two or more run folders (got ${dirs.length}${dirs.length ? `: ${dirs[0]}` : ""})`,
    );
  const names = labelsFor(dirs, labels);
  const runs = dirs.map((dir, i) => ({ label: names[i]!, dir, summary: readSummary(dir) }));
  const real = dirs.map((d) => realpathSync(d));
  const twice = real.findIndex((r, i) => real.indexOf(r) !== i);
  if (twice >= 0) throw new UserError(`${dirs[twice]} is given twice (as ${dirs[real.indexOf(real[twice]!)]} too)`);
  return runs;
}

/** What compare writes into its --out folder. */
const COMPARISON: OutputKind = {
  noun: "a comparison",
  primary: COMPARE_FILES.report,
  files: Object.values(COMPARE_FILES),
};

/** The JSON path of the first number that JSON cannot hold (NaN, ±Infinity), or null. */
function nonFinitePath(value: unknown, path = ""): string | null {
  if (typeof value === "number") return Number.isFinite(value) ? null : path || "/";
  if (value === null || typeof value !== "object") return null;
  for (const [key, inner] of Object.entries(value)) {
    const found = nonFinitePath(inner, `${path}/${key}`);
    if (found) return found;
  }
  return null;
}

/** compare.md, the plot and compare.json into `dir`. */
function writeCompareOutputs(dir: string, comparison: Comparison, runs: readonly RunInput[]): string[] {
  const files: [string, string][] = [
    [COMPARE_FILES.report, renderCompareReport(comparison)],
    [COMPARE_FILES.chart, compareChart(runs)],
    [COMPARE_FILES.data, `${JSON.stringify(comparison, null, 2)}\n`],
  ];
  return files.map(([name, text]) => {
    writeFileSync(join(dir, name), text);
    return name;
  });
}

await runCli(async () => {
  const argv = await parseFlags(
    yargs(hideBin(process.argv))
      .scriptName("bun run compare")
      .command("$0 [runs..]", "profile runs side by side: the first is each row's reference", (y) =>
        y.positional("runs", {
          type: "string",
          array: true,
          describe: "run folders (each holds the summary.json `bun run profile` wrote)",
        }),
      )
      .option("labels", {
        type: "string",
        describe: "the runs' names in the output, comma-separated (default: the folders' names)",
      })
      .option("json", {
        type: "boolean",
        default: false,
        describe: "print the comparison as JSON on stdout (nothing else there)",
      })
      .option("out", {
        type: "string",
        describe: `also write ${Object.values(COMPARE_FILES).join(", ")} into this folder (new or empty)`,
      })
      .option("force", { type: "boolean", default: false, describe: "let --out replace an earlier comparison there" }),
    ["runs"],
  );
  if (argv.force && argv.out === undefined) throw new UserError("--force replaces what --out holds: give --out too");
  if (argv.out !== undefined) checkOutFolder(argv.out, COMPARISON, argv.force);
  const runs = readRuns(((argv.runs ?? []) as unknown[]).map(String), argv.labels);
  const comparison = compareRuns(runs);
  // JSON would write such a number as null: a defect of this tool, refused before anything is written
  const bad = nonFinitePath(comparison);
  if (bad) throw new UserError(`the comparison holds a number JSON cannot (at ${bad}); nothing written`);
  if (argv.out !== undefined) {
    let written: string[] = [];
    const dir = ProfileOutput.prepare(argv.out, { fresh: false, force: argv.force, kind: COMPARISON }).commit(
      (staging) => {
        written = writeCompareOutputs(staging, comparison, runs);
      },
    );
    process.stderr.write(`wrote ${written.length} files to ${dir}: ${written.join(", ")}\n`);
  }
  writeStdout(argv.json ? `${JSON.stringify(comparison, null, 2)}\n` : renderCompareTerminal(comparison));
});
