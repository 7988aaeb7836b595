// Is a cached step slower right after a 512 MiB read pass than right after another step? Pairs in turn.
import { CpuBackend } from "../../src/backends/cpu.ts";
import { loadAnyWeights } from "../../src/cli/common.ts";
import { DEFAULT_STEP_FORM } from "../../src/plan.ts";
import { launchMode } from "../../src/run/launch-modes.ts";
import { Session } from "../../src/run/session.ts";

const backend = CpuBackend.open();
const weights = loadAnyWeights(undefined, process.env.PRESET ?? "smollm2-135m", 0, () => {});
const session = new Session(backend, weights, { form: DEFAULT_STEP_FORM, maxContext: 1100 });
const MIB = 2 ** 20;
const bytes = 512 * MIB;
const buf = backend.alloc(bytes);
backend.readPrepare(buf);
const step = session.step(1);
const mode = launchMode("eager-native");
const ctx = Number(process.env.CTX ?? 1000);
session.prefill(Array.from({ length: ctx }, (_, i) => (i * 7) % 1000));
const time = () => {
  session.setPosition(ctx);
  const a = performance.now();
  mode.run(step, 1);
  return performance.now() - a;
};
// per pair: [read before A, step after pass (A), step after step (B), read after B]
const rows: number[][] = [];
for (let i = 0; i < Number(process.env.PAIRS ?? 300); i++) {
  time();
  const r0 = bytes / backend.readPass(buf, bytes);
  const a = time();
  const b = time();
  const r1 = bytes / backend.readPass(buf, bytes);
  rows.push([r0 / 1e9, a, b, r1 / 1e9]);
}
const med = (x: number[]) => [...x].sort((p, q) => p - q)[Math.floor(x.length / 2)]!;
for (const [name, keep] of [
  ["fast (both reads > 65)", (r: number[]) => r[0]! > 65 && r[3]! > 65],
  ["slow (both reads < 55)", (r: number[]) => r[0]! < 55 && r[3]! < 55],
] as const) {
  const sel = rows.filter(keep);
  const ratio = sel.map((r) => r[1]! / r[2]!);
  console.log(
    `${name}: n=${sel.length} step after pass ${med(sel.map((r) => r[1]!)).toFixed(2)} ms, after step ${med(sel.map((r) => r[2]!)).toFixed(2)} ms, median ratio ${med(ratio).toFixed(3)}`,
  );
}
