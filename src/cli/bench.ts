// bun run bench cpu — how close the CPU backend's cached decode step is to the memory-bandwidth floor.
// Reads this machine's memory-read bandwidth, times GPT-2 small's cached decode step, and prints
// step time ÷ (weight bytes read per step ÷ read bandwidth). Goal: ≤ 1.3.
import yargs from "yargs";
import { hideBin } from "yargs/helpers";

import { CpuBackend } from "../backends/cpu.ts";
import { runCli } from "../errors.ts";
import { PRESETS, parameterCount, type GPT2Config } from "../model/config.ts";
import { randomWeights } from "../model/weights.ts";
import { availableModes, replayMode } from "../run/launch-modes.ts";
import { Session } from "../run/session.ts";
import { summarize } from "../stats.ts";
import { intFlag, parseFlags } from "./common.ts";
import { writeStdout } from "./outputs.ts";

/** Weight bytes a cached step reads: every parameter once, except the position table (one row). */
function weightBytesPerStep(cfg: GPT2Config): number {
  return 4 * (parameterCount(cfg) - cfg.n_positions * cfg.n_embd + cfg.n_embd);
}

const nowMs = () => Bun.nanoseconds() / 1e6;
const BANDWIDTH_BUFFER_BYTES = 512 * 2 ** 20;
const BANDWIDTH_PASSES = 8;

async function benchCpu(steps: number, context: number): Promise<void> {
  const cfg = PRESETS.gpt2!;
  const backend = CpuBackend.open();
  // best of passes over a buffer the size of the weights, before and after the timing: the VM's bandwidth wanders
  const measureBandwidth = () => backend.measureReadBandwidth(BANDWIDTH_BUFFER_BYTES, BANDWIDTH_PASSES);
  const bandwidthBefore = measureBandwidth();
  const session = new Session(backend, randomWeights(cfg, 0), Math.max(context, 1));
  session.prefill(Array.from({ length: context }, (_, i) => (i * 7919) % cfg.vocab_size));
  const step = session.step(1);
  const timeSteps = (run: () => void) => {
    const ms: number[] = [];
    for (let i = 0; i < steps + 3; i++) {
      session.setPosition(context);
      const t0 = nowMs();
      run();
      ms.push(nowMs() - t0);
    }
    return summarize(ms.slice(3)); // the first steps warm caches and threads
  };
  const timed = availableModes(backend).map((mode) => ({ mode, stats: timeSteps(() => mode.run(step, 1)) }));
  const replay = timed.find((t) => t.mode === replayMode(backend))!.stats;
  const bandwidth = Math.max(bandwidthBefore, measureBandwidth());
  const bytes = weightBytesPerStep(cfg);
  const floorMs = (bytes / bandwidth) * 1e3;
  const line = (name: string, s: { median: number; p10: number; p90: number }) =>
    `${name.padEnd(13)} ${s.median.toFixed(2).padStart(8)} ms  (p10 ${s.p10.toFixed(2)}, p90 ${s.p90.toFixed(2)})  ratio ${(s.median / floorMs).toFixed(2)}`;
  writeStdout(`machine: ${backend.deviceName}; date ${new Date().toISOString()}\n`);
  writeStdout(`read bandwidth: ${(bandwidth / 1e9).toFixed(2)} GB/s (best of 2×${BANDWIDTH_PASSES} passes over ${BANDWIDTH_BUFFER_BYTES / 2 ** 20} MiB, ${backend.threads} threads)\n`);
  writeStdout(`GPT-2 small cached decode step at context ${context}: ${(bytes / 1e6).toFixed(1)} MB of weights read per step → floor ${floorMs.toFixed(2)} ms\n`);
  for (const t of timed) writeStdout(`${line(t.mode.name, t.stats)}\n`);
  writeStdout(`step time ÷ (weight bytes ÷ read bandwidth) = ${(replay.median / floorMs).toFixed(2)} (goal ≤ 1.3)\n`);
  session.close();
  backend.close();
}

await runCli(async () => {
  await parseFlags(
    yargs(hideBin(process.argv))
      .scriptName("bun run bench")
      .command("cpu", "CPU decode step vs the memory-bandwidth floor", (y) =>
        y.option("steps", { type: "number", default: 30 }).option("context", { type: "number", default: 64 }),
        (a) => benchCpu(intFlag("steps", a.steps, 1), intFlag("context", a.context, 1, 1023)))
      .demandCommand(1, "name a benchmark: cpu"),
  );
});
