// Libraries that travel with their stamps (scripts/device-check.sh carries the CUDA and CUPTI ones to a lent
// GPU): with DECODE_FLOOR_CARRIED=1 a library whose sources stamp matches is used as built, even where a
// compiler of another version is present; without it the stamp's compiler part makes it rebuild, as on a
// developer's machine. A stub toolkit stands for nvcc (no real compile: it writes a file, or refuses and
// leaves a marker) and DECODE_FLOOR_ROOT for a copy of the project's CUDA sources.
import { afterAll, describe, expect, test } from "bun:test";
import { appendFileSync, chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { CARRIED_ENV } from "../src/native/build.ts";

const ROOT = join(import.meta.dir, "..");
const base = mkdtempSync(join(tmpdir(), "carried-"));
const project = join(base, "project");
const toolkit = join(base, "cuda");
const compiled = join(toolkit, "compiled");
cpSync(join(ROOT, "cuda"), join(project, "cuda"), { recursive: true });
mkdirSync(join(toolkit, "bin"), { recursive: true });
// prints the release in ./version; compiles (writes -o's file) unless ./refuse exists, then leaves ./compiled
writeFileSync(
  join(toolkit, "bin/nvcc"),
  `#!/bin/sh
here=$(dirname "$0")/..
if [ "$1" = --version ]; then cat "$here/version"; exit 0; fi
if [ -f "$here/refuse" ]; then touch "$here/compiled"; echo "nvcc stub: asked to compile" >&2; exit 1; fi
while [ $# -gt 1 ]; do [ "$1" = -o ] && echo stub > "$2"; shift; done
`,
);
chmodSync(join(toolkit, "bin/nvcc"), 0o755);
afterAll(() => rmSync(base, { recursive: true, force: true }));

function build(env: Record<string, string> = {}) {
  const { NVCC: _nvcc, [CARRIED_ENV]: _carried, ...rest } = process.env;
  const p = Bun.spawnSync([process.execPath, join(ROOT, "src/cli/build.ts"), "cuda"], {
    cwd: ROOT,
    env: { ...rest, CUDA_HOME: toolkit, DECODE_FLOOR_ROOT: project, ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  return { code: p.exitCode, stderr: p.stderr.toString() };
}

describe(`${CARRIED_ENV}=1: a carried library is used as built`, () => {
  test("built where it was packed (nvcc release A), carried to a machine whose nvcc is release B", () => {
    writeFileSync(join(toolkit, "version"), "nvcc stub, release A\n");
    const packed = build();
    expect(packed.stderr).toContain("(built)");
    expect(packed.code).toBe(0);
    writeFileSync(join(toolkit, "version"), "nvcc stub, release B\n");
    writeFileSync(join(toolkit, "refuse"), "");
  });

  test("with the variable set and the sources stamp matching: used as built, nvcc not asked to compile", () => {
    const r = build({ [CARRIED_ENV]: "1" });
    expect(r.stderr).toContain(`${join(project, "build/libgpt2_cuda.so")} (up to date)`);
    expect(r.code).toBe(0);
    expect(existsSync(compiled)).toBe(false);
  });

  test("without it: another nvcc release rebuilds, and a failed compile is one error line", () => {
    const r = build();
    expect(r.code).not.toBe(0);
    expect(existsSync(compiled)).toBe(true);
    const errors = r.stderr.split("\n").filter((l) => l.startsWith("error:"));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/^error: build cuda failed \(exit 1\):.*nvcc stub: asked to compile/);
  });

  test("with it, but sources changed since the library was built: it rebuilds", () => {
    rmSync(compiled);
    appendFileSync(join(project, "cuda/plan.cpp"), "\n// changed after packing\n");
    const r = build({ [CARRIED_ENV]: "1" });
    expect(r.code).not.toBe(0);
    expect(existsSync(compiled)).toBe(true);
  });
});
