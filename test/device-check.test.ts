// scripts/device-check.sh, rehearsed on the CPU: `run` with REHEARSE=1 takes the same steps (build, the hot
// kernels' SASS, generate in every launch mode, a profile with the interventions packed into one file) through the emulator on
// gpt2-tiny, under the same per-step timeouts, and leaves at most 8 files in $OUT as the device returns them.
// With a packed .device/ (scripts/device-check.sh pack: Bun xz-compressed takes ~90 s the first time, so
// this test only repacks where .device/bun.xz is already there) the rehearsal runs the bundled CLIs.
import { describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "..");
const script = (args: string[], env: Record<string, string> = {}) =>
  Bun.spawnSync(["bash", "scripts/device-check.sh", ...args], { cwd: ROOT, env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe" });

const canPack = existsSync(join(ROOT, ".device/bun.xz")) && existsSync(join(ROOT, "../shared/device/pack-bun.sh"));
if (!canPack) console.log("device-check.test.ts: not repacking: no .device/bun.xz yet (run scripts/device-check.sh pack once) or no ../shared/device");

describe("scripts/device-check.sh", () => {
  test.skipIf(!canPack)("pack: the bundled CLIs, gpt2-mini and the GPU libraries (CUDA's xz-compressed) with their stamps, in at most 50 MiB", () => {
    const p = script(["pack"]);
    expect(p.exitCode).toBe(0);
    for (const entry of ["build", "verify", "generate", "profile"]) expect(existsSync(join(ROOT, `.device/app/${entry}.js`))).toBe(true);
    for (const lib of ["libgpt2_cuda.so.xz", "libgpt2_cuda.so.stamp", "libgpt2_cupti.so"]) expect(existsSync(join(ROOT, ".device/build", lib))).toBe(true);
    expect(p.stdout.toString()).toMatch(/\.device: \d+ MiB \(at most 50\)/);
  }, 600_000);

  test("run, rehearsed on the emulator: every step passes and at most 8 files come back, named as the device allows", () => {
    const out = mkdtempSync(join(tmpdir(), "device-check-"));
    try {
      const p = script(["run"], { REHEARSE: "1", OUT: out });
      const logs = readdirSync(out).filter((f) => f.endsWith(".log")).map((f) => readFileSync(join(out, f), "utf8")).join("\n");
      expect(p.exitCode).toBe(0);
      expect(logs).not.toMatch(/FAILED|SKIPPED/);
      const files = readdirSync(out);
      expect(files.length).toBeLessThanOrEqual(8);
      for (const f of files) {
        expect(f).toMatch(/^[A-Za-z0-9._-]+$/);
        expect(statSync(join(out, f)).isFile()).toBe(true);
      }
      expect(files).toEqual(expect.arrayContaining(["device.log", "generate.log", "profile.log", "profile-fused.tgz"]));
      const generated = readFileSync(join(out, "generate.log"), "utf8").split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
      expect(generated.map((g) => `${g.cache} ${g.mode}`)).toEqual(["on eager", "on eager-native", "on graph", "on graph-pdl", "on persistent", "off eager"]);
      const listing = Bun.spawnSync(["tar", "-tzf", join(out, "profile-fused.tgz")]).stdout.toString();
      for (const f of ["summary.json", "trace.json", "report.md", "kernels.csv"]) expect(listing).toContain(`profile-fused/${f}`);
      // the fused profile times the interventions too: fp32 and bf16, one and four sequences per step
      const summary = JSON.parse(Bun.spawnSync(["tar", "-xzOf", join(out, "profile-fused.tgz"), "profile-fused/summary.json"]).stdout.toString());
      expect(summary.interventions.configs.map((c: { dtype: string; batch: number }) => `${c.dtype} ${c.batch}`)).toEqual(["f32 1", "f32 4", "bf16 1", "bf16 4"]);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }, 600_000);

  test("run and pack are the only verbs; a wrong one is one usage line and exit 2", () => {
    const p = script(["bogus"]);
    expect(p.exitCode).toBe(2);
    expect(p.stderr.toString().trim().split("\n")).toHaveLength(1);
  });
});
