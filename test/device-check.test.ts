// scripts/device-check.sh, rehearsed on the CPU: `run` with REHEARSE=1 takes the same steps in the same order
// (build, the hot kernels' SASS, the fused profile with the interventions, generate in every launch mode and
// their bit-identity on gpt2-tiny, llama-tiny's profile, the unfused profile; the steps that need a GPU logged "not rehearsed") through
// the emulator, under the same budget (its timeouts 4x, for 2 shared cores), and leaves at most 8 files in $OUT as
// the device returns them. With a packed .device/ (scripts/device-check.sh pack: Bun xz-compressed takes ~90 s the first
// time, so this test only repacks where .device/bun.xz is already there) the rehearsal runs the bundled CLIs.
import { describe, expect, test } from "bun:test";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { embeddedCode, findCuobjdump } from "../src/native/sass.ts";

const ROOT = join(import.meta.dir, "..");
const script = (args: string[], env: Record<string, string> = {}) =>
  Bun.spawnSync(["bash", "scripts/device-check.sh", ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdout: "pipe",
    stderr: "pipe",
  });

/** The steps of a run in order of value (the budget table's order); the rehearsal runs these on the emulator. */
const ORDER = [
  "unpack",
  "build",
  "sass",
  "profile fused",
  "generate eager",
  "generate eager-native",
  "generate graph",
  "generate graph-pdl",
  "generate persistent",
  "generate uncached",
  "bit-identity",
  "verify",
  "profile llama",
  "profile unfused",
  "profile peers",
  "sanitizer memcheck",
  "sanitizer synccheck",
  "profile compile",
];
const REHEARSED = [
  "build",
  "profile fused",
  ...ORDER.filter((n) => n.startsWith("generate ")),
  "bit-identity",
  "profile llama",
  "profile unfused",
];

const canPack = existsSync(join(ROOT, ".device/bun.xz")) && existsSync(join(ROOT, "../shared/device/pack-bun.sh"));
if (!canPack)
  console.log(
    "device-check.test.ts: not repacking: no .device/bun.xz yet (run scripts/device-check.sh pack once) or no ../shared/device",
  );

describe("scripts/device-check.sh", () => {
  test.skipIf(!canPack)(
    "pack: the bundled CLIs and the GPU libraries (CUDA's without PTX, xz-compressed) with their stamps, the CUDA one taken as built under run's settings; the whole transfer at most 62 MiB",
    () => {
      const ownLibrary = join(ROOT, "build/libgpt2_cuda.so");
      const before = existsSync(ownLibrary) ? readFileSync(`${ownLibrary}.stamp`, "utf8") : null;
      const p = script(["pack"]);
      expect(p.exitCode).toBe(0);
      // the kit's library is built where the project's is, which is put back as it was
      expect(existsSync(ownLibrary) ? readFileSync(`${ownLibrary}.stamp`, "utf8") : null).toBe(before);
      // the CLIs travel as one xz archive, unpacked into build/app by `run` (the kit never carries both)
      expect(existsSync(join(ROOT, ".device/app"))).toBe(false);
      const bundled = Bun.spawnSync(["tar", "-tJf", join(ROOT, ".device/app.tar.xz")]).stdout.toString();
      for (const entry of ["build", "verify", "generate", "profile"]) expect(bundled).toContain(`app/${entry}.js\n`);
      for (const lib of ["libgpt2_cuda.so.xz", "libgpt2_cuda.so.stamp", "libgpt2_cupti.so", "libgpt2_cupti.so.stamp"])
        expect(existsSync(join(ROOT, ".device/build", lib))).toBe(true);
      expect(existsSync(join(ROOT, ".device/fixtures"))).toBe(false); // the tree's gpt2-tiny travels anyway
      const m = p.stdout
        .toString()
        .match(
          /^transfer: ([\d.]+) MiB \(at most 62\): tracked ([\d.]+) MiB, untracked ([\d.]+) MiB, \.device ([\d.]+) MiB$/m,
        );
      expect(m).not.toBeNull();
      const [total, ...parts] = m!.slice(1).map(Number);
      expect(total!).toBeLessThanOrEqual(62);
      expect(Math.abs(parts.reduce((a, b) => a + b, 0) - total!)).toBeLessThan(0.2);
      // as the device unpacks it: a project root whose build/ holds the carried CUDA library and its stamp
      const device = mkdtempSync(join(tmpdir(), "device-root-"));
      try {
        symlinkSync(join(ROOT, "cuda"), join(device, "cuda"));
        mkdirSync(join(device, "build"));
        const lib = join(device, "build/libgpt2_cuda.so");
        writeFileSync(lib, Bun.spawnSync(["xz", "-dc", join(ROOT, ".device/build/libgpt2_cuda.so.xz")]).stdout);
        copyFileSync(join(ROOT, ".device/build/libgpt2_cuda.so.stamp"), `${lib}.stamp`);
        // run's settings (DECODE_FLOOR_CUDA_PTX=0) take it as built, with no nvcc; the project's own flags do not
        const build = (ptx: string) =>
          Bun.spawnSync(["bun", "src/cli/build.ts", "cuda"], {
            cwd: ROOT,
            env: {
              ...process.env,
              DECODE_FLOOR_ROOT: device,
              NVCC: "/nonexistent/nvcc",
              DECODE_FLOOR_CARRIED: "1",
              DECODE_FLOOR_CUDA_PTX: ptx,
            },
            stdout: "pipe",
            stderr: "pipe",
          });
        const asRun = build("0");
        expect(asRun.exitCode).toBe(0);
        expect(asRun.stdout.toString() + asRun.stderr.toString()).toContain("up to date");
        expect(build("1").exitCode).not.toBe(0);
        // the sm_90 device runs the library's SASS: its PTX (for GPUs past sm_90) stays here
        const cuobjdump = findCuobjdump();
        if (cuobjdump) {
          const code = embeddedCode(lib, cuobjdump);
          expect(code.elf).toContain("attention.sm_90.cubin");
          expect(code.ptx).toEqual([]);
        }
      } finally {
        rmSync(device, { recursive: true, force: true });
      }
    },
    600_000,
  );

  test("run, rehearsed on the emulator: the steps in order of value under a printed budget, every one passes, at most 8 files come back", () => {
    const out = mkdtempSync(join(tmpdir(), "device-check-"));
    try {
      const p = script(["run"], { REHEARSE: "1", OUT: out });
      expect(p.exitCode).toBe(0);
      const files = readdirSync(out);
      const logs = files
        .filter((f) => f.endsWith(".log"))
        .map((f) => readFileSync(join(out, f), "utf8"))
        .join("\n");
      expect(logs).not.toMatch(/FAILED|SKIPPED/);
      expect(files.length).toBeLessThanOrEqual(8);
      for (const f of files) {
        expect(f).toMatch(/^[A-Za-z0-9._-]+$/);
        expect(statSync(join(out, f)).isFile()).toBe(true);
      }
      expect(files).toEqual(
        expect.arrayContaining([
          "device.log",
          "generate.log",
          "verify.log",
          "profile-fused.tgz",
          "profile-llama.tgz",
          "profile-unfused.tgz",
        ]),
      );

      // the budget table first: every step, its estimate and timeout, in the order the steps run, within 300 s
      const log = readFileSync(join(out, "device.log"), "utf8").split("\n");
      // a packed kit's CLIs, unpacked from its archive as on the device; else the sources
      const packed = existsSync(join(ROOT, ".device/app.tar.xz"));
      expect(log).toContainEqual(expect.stringContaining(`CLIs: ${packed ? "build/app" : "src/cli"};`));
      const start = log.findIndex((l) => l.startsWith("budget:"));
      const rows = log
        .slice(start + 1, log.findIndex((l, i) => i > start && /^ {2}total /.test(l)) + 1)
        .map((l) => l.trim().split(/ {2,}/));
      const total = rows.pop()!;
      const budget = new Map(rows.map(([name, numbers]) => [name!, Number(numbers!.split(/ +/)[0])]));
      expect([...budget.keys()]).toEqual(ORDER);
      expect(Number(total[1]!.split(" ")[0])).toBe([...budget.values()].reduce((a, b) => a + b, 0));
      expect(Number(total[1]!.split(" ")[0])).toBeLessThanOrEqual(300);
      // then the steps in that order, each rehearsed one's elapsed time beside its estimate as it ends
      expect(
        log
          .filter((l) => l.startsWith("== ") && !l.startsWith("== done"))
          .map((l) => l.slice(3).replace(/ \(at .*/, "")),
      ).toEqual(ORDER);
      for (const name of REHEARSED)
        expect(log).toContainEqual(
          expect.stringMatching(new RegExp(`^-- ${name}: \\d+ s \\(expected ${budget.get(name)} s\\), ok$`)),
        );
      for (const name of ORDER.filter((n) => !REHEARSED.includes(n) && n !== "sass"))
        expect(log).toContainEqual(expect.stringMatching(new RegExp(`^${name}: not rehearsed \\(`)));
      // and the table again at the end, with the elapsed times
      const end = log.findIndex((l) => l.startsWith("budget against elapsed:"));
      expect(end).toBeGreaterThan(start);
      for (const name of REHEARSED)
        expect(log.slice(end)).toContainEqual(
          expect.stringMatching(new RegExp(`^ {2}${name} +${budget.get(name)} +\\d+ {2}ok$`)),
        );

      const generated = readFileSync(join(out, "generate.log"), "utf8")
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l));
      expect(generated.map((g) => `${g.cache} ${g.mode}`)).toEqual([
        "on eager",
        "on eager-native",
        "on graph",
        "on graph-pdl",
        "on persistent",
        "off eager",
      ]);
      expect(log).toContain(
        "bit-identity: eager, eager-native, graph, graph-pdl, persistent, uncached generated the same 48 tokens, those of test/fixtures/gpt2-tiny/expected.json",
      );
      for (const plan of ["fused", "unfused"]) {
        const listing = Bun.spawnSync(["tar", "-tzf", join(out, `profile-${plan}.tgz`)]).stdout.toString();
        for (const f of ["summary.json", "trace.json", "report.md", "kernels.csv"])
          expect(listing).toContain(`profile-${plan}/${f}`);
        expect(listing).toContain(`profile-${plan}.log`);
      }
      // the fused profile times the interventions too: fp32 and bf16, one and four sequences per step
      const summary = JSON.parse(
        Bun.spawnSync(["tar", "-xzOf", join(out, "profile-fused.tgz"), "profile-fused/summary.json"]).stdout.toString(),
      );
      expect(
        summary.interventions.configs.map((c: { dtype: string; batch: number }) => `${c.dtype} ${c.batch}`),
      ).toEqual(["f32 1", "f32 4", "bf16 1", "bf16 4"]);
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
