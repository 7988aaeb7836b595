// Does the step's time follow the read passes' rate? Rounds of: passes at 512 MiB, 1 GiB, 4 GiB, then cached steps.
import { CpuBackend } from "../../src/backends/cpu.ts";
import { loadAnyWeights } from "../../src/cli/common.ts";
import { DEFAULT_STEP_FORM } from "../../src/plan.ts";
import { launchMode } from "../../src/run/launch-modes.ts";
import { Session } from "../../src/run/session.ts";

const backend = CpuBackend.open();
const weights = loadAnyWeights(undefined, "smollm2-135m", 0, () => {});
const session = new Session(backend, weights, { form: DEFAULT_STEP_FORM, maxContext: 300 });
const MIB = 2 ** 20;
const buf = backend.alloc(4096 * MIB);
backend.readPrepare(buf);
const sizes = [256, 512, 1024, 4096].map((m) => m * MIB);
const step = session.step(1);
const mode = launchMode("eager-native");
const rounds = Number(process.env.ROUNDS ?? 60);
session.prefill(Array.from({ length: 256 }, (_, i) => (i * 7) % 1000));
console.log("t_s   " + sizes.map((s) => `${s / MIB}MiB`.padStart(8)).join("") + "  step_ms(min of 5)  weights/step GB/s");
const t0 = performance.now();
for (let r = 0; r < rounds; r++) {
  const rates = sizes.map((s) => {
    let best = 0;
    for (let i = 0; i < 2; i++) best = Math.max(best, s / backend.readPass(buf, s));
    return best;
  });
  let ms = Infinity;
  for (let i = 0; i < 6; i++) {
    session.setPosition(256);
    const a = performance.now();
    mode.run(step, 1);
    const b = performance.now();
    if (i > 0) ms = Math.min(ms, b - a);
  }
  console.log(
    ((performance.now() - t0) / 1e3).toFixed(1).padStart(5) +
      " " +
      rates.map((x) => (x / 1e9).toFixed(1).padStart(8)).join("") +
      "  " +
      ms.toFixed(2).padStart(8) +
      "  " +
      (538.7e6 / ms / 1e6).toFixed(1),
  );
  await Bun.sleep(Number(process.env.SLEEP_MS ?? 2000));
}
