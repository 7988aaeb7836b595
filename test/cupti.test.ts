// The CUPTI tracer: builds cleanly, loads without a GPU, fails to start with one clear line where there is no
// driver, and its records' C layout matches the TypeScript reader. Real kernel capture needs a GPU.
import { describe, expect, test } from "bun:test";
import { dlopen } from "bun:ffi";
import { cpSync, existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CuptiError, CUPTI_SYMBOLS, CuptiTracer } from "../src/native/cupti.ts";
import { libraryPath, ROOT } from "../src/native/build.ts";
import { OP_SYMBOLS, RUNTIME_SYMBOLS } from "../src/native/symbols.ts";

function tracer(): CuptiTracer {
  const t = CuptiTracer.open();
  if ("error" in t) throw new Error(t.error);
  return t;
}

// A GPU means: the CUDA kernel library is built and be_init(0) succeeds.
const CUDA_SYMBOLS = { ...RUNTIME_SYMBOLS, op_gelu: OP_SYMBOLS.op_gelu };
let cuda: ReturnType<typeof dlopen<typeof CUDA_SYMBOLS>>["symbols"] | null = null;
let noGpuReason = "";
if (!existsSync(libraryPath("cuda"))) {
  noGpuReason = `${libraryPath("cuda")} is not built`;
} else {
  try {
    const lib = dlopen(libraryPath("cuda"), CUDA_SYMBOLS).symbols;
    const rc = lib.be_init(0);
    if (rc === 0) cuda = lib;
    else noGpuReason = `be_init(0) returned ${rc} (${lib.be_error_string(rc)})`;
  } catch (e) {
    noGpuReason = `${libraryPath("cuda")} does not load: ${(e as Error).message.split("\n")[0]}`;
  }
}
const gpu = cuda !== null;
if (!gpu) console.log(`cupti.test.ts: skipping the kernel-capture test, no GPU: ${noGpuReason}`);

describe("CUPTI tracer library", () => {
  test("builds with g++ -Wall -Werror from a clean build directory and exports the C ABI", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cupti-build-"));
    try {
      // build.ts and what it imports
      for (const file of ["src/native/build.ts", "src/native/emu-source.ts", "src/ops.ts"])
        cpSync(join(ROOT, file), join(dir, file));
      cpSync(join(ROOT, "cuda/cupti"), join(dir, "cuda/cupti"), { recursive: true });
      const build: typeof import("../src/native/build.ts") = await import(join(dir, "src/native/build.ts"));
      const r = build.ensureBuilt("cupti", { quiet: true });
      expect(r.rebuilt).toBe(true);
      expect(r.path).toBe(join(dir, "build/libgpt2_cupti.so"));
      expect(r.log).toBe(""); // no warnings
      const nm = Bun.spawnSync(["nm", "-D", "--defined-only", r.path]).stdout.toString();
      for (const name of Object.keys(CUPTI_SYMBOLS)) expect(nm).toContain(` T ${name}\n`);
      const ldd = Bun.spawnSync(["ldd", r.path]).stdout.toString();
      expect(ldd).toMatch(/libcupti\.so\.13 => \/\S+\/libcupti\.so\.13/); // found through the rpath
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("loads through bun:ffi and reads CUPTI's clock", () => {
    const t = tracer();
    expect(CuptiTracer.open()).toBe(t); // one tracer per process
    expect(t.origin_ns).toBeGreaterThan(0n);
    const a = t.now_ns();
    const b = t.now_ns();
    expect(a).toBeGreaterThanOrEqual(0);
    expect(b).toBeGreaterThanOrEqual(a);
  });

  test("the C record layout matches the TypeScript reader (synthetic records through the real parser)", () => {
    const t = tracer();
    t.clear();
    const n = 5;
    t.selftestInject(n, t.origin_ns + 1_000_000n);
    const ks = t.kernels();
    const api = t.apiCalls();
    t.clear();
    expect(ks.length).toBe(n);
    expect(api.length).toBe(n);
    for (let i = 0; i < n; i++) {
      const odd = i % 2 === 1;
      expect(ks[i]).toEqual({
        start_ns: 1_000_000 + 1000 * i,
        end_ns: 1_000_000 + 1000 * i + 500 + i,
        correlation: 100 + i,
        stream: 13 + i,
        graph_id: odd ? i : 0,
        graph_node_id: odd ? BigInt(7 * i + 1) : 0n,
        grid: [1 + i, 2, 3],
        block: [32 * i + 32, 4, 1],
        registers: 16 + i,
        static_shared_bytes: 48 * i,
        dynamic_shared_bytes: 1024 + i,
        name: odd ? "linear_matvec_kernel" : "layernorm_kernel(float*, float const*, int)",
      });
      expect(api[i]).toEqual({
        start_ns: 1_000_000 + 1000 * i - 200,
        end_ns: 1_000_000 + 1000 * i - 50,
        correlation: 100 + i,
        cbid: odd ? 311 : 211,
        domain: "runtime",
        return_value: i,
        process_id: 4242,
        thread_id: 77 + i,
        name: odd ? "cudaGraphLaunch" : "cudaLaunchKernel",
      });
    }
    expect(t.kernels()).toEqual([]);
    expect(t.dropped()).toBe(0);
  });

  const driver = (() => {
    const t = CuptiTracer.open();
    return !("error" in t) && t.driverAvailable();
  })();
  test.skipIf(driver)("without a CUDA driver, start() fails with one line naming the CUPTI error and the cause", () => {
    const t = tracer();
    let err: unknown;
    try {
      t.start();
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(CuptiError);
    const message = (err as CuptiError).message;
    expect(message).not.toContain("\n");
    expect(message).toMatch(/^CUPTI tracing could not start: CUPTI_ERROR_[A-Z_]+ \(\d+\); no CUDA driver/);
    expect((err as CuptiError).code).not.toBe(0);
    // nothing was enabled, so these are no-ops rather than errors
    t.flush();
    t.stop();
    expect(t.kernels()).toEqual([]);
  });

  test.skipIf(!gpu)("captures the kernels and launch calls of a tiny eager launch", () => {
    const be = cuda!;
    const t = tracer();
    t.clear();
    t.start({ runtime: true });
    const n = 4096; // floats
    const x = be.be_alloc(n * 4);
    const y = be.be_alloc(n * 4);
    expect(x).not.toBeNull();
    expect(y).not.toBeNull();
    const t0 = t.now_ns();
    be.op_gelu(y, x, n);
    be.op_gelu(y, x, n);
    expect(be.be_synchronize()).toBe(0);
    const t1 = t.now_ns();
    t.flush();
    t.stop();
    be.be_free(x);
    be.be_free(y);
    const ks = t.kernels().filter((k) => k.start_ns >= t0);
    const api = t.apiCalls();
    expect(t.dropped()).toBe(0);
    t.clear();
    expect(ks.length).toBe(2);
    for (const k of ks) {
      expect(k.end_ns).toBeGreaterThan(k.start_ns);
      expect(k.end_ns).toBeLessThanOrEqual(t1);
      expect(k.name).toMatch(/gelu/i);
      expect(k.graph_id).toBe(0);
      expect(k.grid[0] * k.grid[1] * k.grid[2] * k.block[0] * k.block[1] * k.block[2]).toBeGreaterThan(0);
      expect(k.registers).toBeGreaterThan(0);
      const launch = api.find((a) => a.correlation === k.correlation);
      expect(launch?.name).toBe("cudaLaunchKernel");
      expect(launch!.start_ns).toBeLessThanOrEqual(k.start_ns);
    }
  });
});
