// The CUDA library builds with nvcc (sm_90 + PTX, compressed, warnings as errors), and ptxas's resource report shows
// a kernel for every op family and no register spills. Skipped where nvcc is missing.
import { describe, expect, test } from "bun:test";
import { existsSync, rmSync } from "node:fs";

import { ensureBuilt, hasNvcc, libraryPath, ROOT } from "../src/native/build.ts";
import { embeddedCode, findCuobjdump } from "../src/native/sass.ts";
import {
  kernelName,
  missingFamilies,
  parseResourceUsage,
  readResourceUsage,
  RESOURCE_USAGE_PATH,
} from "../src/native/resource-usage.ts";

const SAMPLE = `ptxas info    : Compiling entry function '_Z20linear_matvec_kernelILi4EEvPfPKfS2_S2_iii' for 'sm_90'
ptxas info    : Function properties for _Z20linear_matvec_kernelILi4EEvPfPKfS2_S2_iii
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compiling entry function '_Z14lm_head_kernelPfPKfS1_iii' for 'sm_90'
ptxas info    : Function properties for _Z14lm_head_kernelPfPKfS1_iii
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
`;

describe("resource-usage parser", () => {
  test("reads registers, shared memory and spills per kernel", () => {
    expect(parseResourceUsage(SAMPLE)).toEqual([
      {
        kernel: "linear_matvec_kernel<4>",
        mangled: "_Z20linear_matvec_kernelILi4EEvPfPKfS2_S2_iii",
        arch: "sm_90",
        registers: 32,
        barriers: 1,
        smemBytes: 1024,
        stackBytes: 8,
        spillStores: 4,
        spillLoads: 12,
      },
      {
        kernel: "lm_head_kernel",
        mangled: "_Z14lm_head_kernelPfPKfS1_iii",
        arch: "sm_90",
        registers: 32,
        barriers: 0,
        smemBytes: 0,
        stackBytes: 0,
        spillStores: 0,
        spillLoads: 0,
      },
    ]);
    expect(kernelName("notmangled")).toBe("notmangled");
  });

  test("names template kernels by their integer, builtin-type and named-type arguments", () => {
    expect(kernelName("_Z20linear_matvec_kernelI13__nv_bfloat16Li8ELi4EEv10MatvecArgsb")).toBe(
      "linear_matvec_kernel<__nv_bfloat16, 8, 4>",
    );
    expect(kernelName("_Z16attention_kernelIfLi4EEvPf11AttnScratchPKfPKT_S6_PKiiiii")).toBe(
      "attention_kernel<float, 4>",
    );
    expect(kernelName("_Z12embed_kernelI6__halfLi8EEvPfPKiS3_PKT_S6_iiii")).toBe("embed_kernel<__half, 8>");
    expect(kernelName("_Z11pair_kernelI6__halfS0_Li1EEvPKT_PKT0_")).toBe("pair_kernel<__half, __half, 1>"); // S0_: the second substitution
    expect(kernelName("_Z22persistent_step_kernelI6__halfLi8EEvPK8StepTaskiP11StepBarrier")).toBe(
      "persistent_step_kernel<__half, 8>",
    );
    expect(kernelName("_Z3fooIPfEvv")).toBe("foo"); // an argument it cannot read: the bare name
  });
});

if (!hasNvcc())
  console.log("cuda-build.test.ts: skipping the CUDA library tests, nvcc not found (set NVCC or CUDA_HOME)");
describe.skipIf(!hasNvcc())("nvcc build of libgpt2_cuda.so", () => {
  test("builds warning-free, every op family has a kernel, nothing spills", () => {
    // the report is written when the library is (re)built: force a build if only the library is there
    if (!existsSync(RESOURCE_USAGE_PATH)) rmSync(`${libraryPath("cuda")}.stamp`, { force: true });
    ensureBuilt("cuda", { quiet: true });
    const rows = readResourceUsage();
    expect(rows).toBeDefined();
    expect(rows!.length).toBeGreaterThan(0);
    expect(missingFamilies(rows!)).toEqual([]);
    expect(rows!.filter((r) => r.spillStores + r.spillLoads > 0).map((r) => r.kernel)).toEqual([]);
    expect(rows!.every((r) => r.arch === "sm_90")).toBe(true);
  }, 600_000);

  test.skipIf(!findCuobjdump())(
    "the library holds sm_90 code and the PTX other GPUs compile as it loads, its fatbin compressed",
    () => {
      ensureBuilt("cuda", { quiet: true });
      const code = embeddedCode(libraryPath("cuda"), findCuobjdump()!);
      expect(code.elf).toContain("attention.sm_90.cubin");
      expect(code.ptx).toContain("attention.sm_90.ptx");
      // uncompressed, its cubins and PTX alone are over 70 MB
      expect(Bun.file(libraryPath("cuda")).size).toBeLessThan(20e6);
    },
    600_000,
  );

  test("without nvcc (a GPU machine that has none) the library built here is used: its sources stamp matches", () => {
    ensureBuilt("cuda", { quiet: true });
    const noNvcc = { ...process.env, NVCC: "/nonexistent/nvcc" };
    const build = Bun.spawnSync(["bun", "src/cli/build.ts", "cuda"], { cwd: ROOT, env: noNvcc, stderr: "pipe" });
    expect(build.exitCode).toBe(0);
    expect(build.stderr.toString()).toContain("up to date");
  }, 600_000);
});
