// The cross-block synchronisation of the persistent step and the last-block merges (cuda/launch.h grid_arrive and
// grid_wait, cuda/last_block.h arrive_last) under the C++11 relaxed memory model: test/relacy/grid_sync.cpp, a
// Relacy model of 2 blocks x 2 threads, built with g++ and run here. The CPU emulator runs its fibers one at a
// time, sequentially consistently, so only this model catches a missing order without a GPU.
//
// The model's orders must be the CUDA code's (read from the headers as text, so weakening one fails here on any
// machine), the model must pass with them, and it must reject each planted weaker order:
//   GRID_ARRIVE_ORDER=relaxed (grid_arrive's count, not release) and GRID_POLL_ORDER=relaxed (grid_wait's poll, not
//   acquire): task 1 reads another block's task-0 output with no happens-before, a data race in check_task0;
//   MERGE_COUNT_ORDER=relaxed (arrive_last's count, not acq_rel): the last block reads the other block's partial
//   with no happens-before, a data race in merge.
// Relacy's random scheduler seeds every iteration with its index: the same schedules, the same result, every run.
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "..");
const MODEL = join(import.meta.dir, "relacy/grid_sync.cpp");
const hasRelacy = existsSync("/usr/include/relacy/relacy.hpp");
if (!hasRelacy)
  console.log(
    "grid-sync-relacy.test.ts: skipping the Relacy model runs, /usr/include/relacy not found (apt-get install relacy-dev)",
  );
const TIMEOUT_MS = 120_000; // g++ on Relacy's headers takes seconds on 2 busy cores; Bun's default is 5 s

// Each CUDA function of the protocol and the model's macros for the orders it names, in the order it names them.
const PROTOCOL = [
  { file: "cuda/launch.h", fn: "grid_arrive", macros: ["GRID_ARRIVE_ORDER"] },
  { file: "cuda/launch.h", fn: "grid_wait", macros: ["GRID_POLL_ORDER"] },
  { file: "cuda/last_block.h", fn: "arrive_last", macros: ["MERGE_COUNT_ORDER", "MERGE_RESET_ORDER"] },
];

// The planted variants: a -D weakening one order, and the function of the model where Relacy must report the race.
const PLANTS = [
  {
    order: "grid_arrive's count relaxed, not release",
    define: "GRID_ARRIVE_ORDER=rl::mo_relaxed",
    raceIn: "check_task0",
  },
  { order: "grid_wait's poll relaxed, not acquire", define: "GRID_POLL_ORDER=rl::mo_relaxed", raceIn: "check_task0" },
  { order: "arrive_last's count relaxed, not acq_rel", define: "MERGE_COUNT_ORDER=rl::mo_relaxed", raceIn: "merge" },
];

const withoutComments = (source: string) => source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");

// The memory orders (relaxed, acquire, ...) named in the body of the one function `fn` defined in `file`, in order.
function ordersInFunction(file: string, fn: string): string[] {
  const source = withoutComments(readFileSync(join(ROOT, file), "utf8"));
  const heads = [...source.matchAll(new RegExp(`\\b${fn}\\s*\\([^)]*\\)\\s*\\{`, "g"))];
  if (heads.length !== 1) throw new Error(`${file}: ${heads.length} definitions of ${fn}, expected 1`);
  const open = heads[0]!.index! + heads[0]![0].length - 1;
  let depth = 0,
    close = open;
  for (; close < source.length; close++) {
    if (source[close] === "{") depth++;
    else if (source[close] === "}" && --depth === 0) break;
  }
  return [...source.slice(open, close).matchAll(/memory_order_(\w+)/g)].map((m) => m[1]!);
}

// The order the model's real build uses for `macro`: its #define default (rl::mo_release -> release).
function modelOrder(macro: string): string {
  const m = readFileSync(MODEL, "utf8").match(new RegExp(`#define ${macro} rl::mo_(\\w+)`));
  if (!m) throw new Error(`${MODEL}: no default for ${macro}`);
  return m[1]!;
}

interface Run {
  code: number;
  stdout: string; // Relacy's report
}

// Builds the model with `defines` into `dir` and runs it; a failed build is a Run with g++'s output.
async function buildAndRun(dir: string, name: string, defines: string[]): Promise<Run> {
  const exe = join(dir, name);
  const gcc = Bun.spawn(["g++", "-std=c++17", "-O0", ...defines.map((d) => `-D${d}`), "-o", exe, MODEL], {
    stdout: "pipe",
    stderr: "pipe",
  });
  const gccOutput = await new Response(gcc.stderr).text();
  if ((await gcc.exited) !== 0) return { code: -1, stdout: `g++ failed:\n${gccOutput}` };
  const run = Bun.spawn([exe], { stdout: "pipe", stderr: "inherit" });
  const stdout = await new Response(run.stdout).text();
  return { code: await run.exited, stdout };
}

// The failing event of Relacy's execution history, "[108] 2: DATA RACE (data race detected), in check_task0,
// <file>(<line>)" (the other events are lower case or bracketed): what it found, in which function of the model.
function firstReport(stdout: string): { found: string; inFunction: string } | null {
  const m = stdout.match(/^\[\d+\] \d+: ([A-Z][A-Z -]+ \(.*\)), in (\w+), /m);
  return m ? { found: m[1]!, inFunction: m[2]! } : null;
}

describe("the model's memory orders are the CUDA code's", () => {
  test.each(PROTOCOL.map((p) => [`${p.fn} (${p.file})`, p] as const))("%s", (_, p) => {
    expect(ordersInFunction(p.file, p.fn)).toEqual(p.macros.map(modelOrder));
  });
});

// Every build started at once on first use (g++ is most of the time, and a plant's run stops at its first report),
// into a directory removed after the file's tests.
const dir = mkdtempSync(join(tmpdir(), "grid-sync-relacy-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let runs: Map<string, Promise<Run>> | null = null;
function runOf(variant: string): Promise<Run> {
  runs ??= new Map([
    ["real", buildAndRun(dir, "real", [])],
    ...PLANTS.map((p, i) => [p.define, buildAndRun(dir, `plant${i}`, [p.define])] as const),
  ]);
  return runs.get(variant)!;
}

describe.skipIf(!hasRelacy)(
  "Relacy on the grid barrier and the last-block merge (2 blocks x 2 threads, 2 tasks)",
  () => {
    test(
      "with the code's orders: no data race, no failed assertion, every counter back at zero, in every iteration",
      async () => {
        const run = await runOf("real");
        expect(firstReport(run.stdout)).toBeNull();
        expect(run.stdout).toMatch(/^iterations: \d+$/m);
        expect(run.code).toBe(0);
      },
      TIMEOUT_MS,
    );

    test.each(PLANTS.map((p) => [p.order, p] as const))(
      "planted %s: Relacy reports a data race",
      async (_, p) => {
        const run = await runOf(p.define);
        expect(firstReport(run.stdout)).toEqual({ found: "DATA RACE (data race detected)", inFunction: p.raceIn });
        expect(run.code).toBe(1);
      },
      TIMEOUT_MS,
    );
  },
);
