// libgpt2_cuda.so loads on any machine. Without a usable GPU, be_init(0) fails with a code the runtime
// names (cudaErrorInsufficientDriver without a driver, cudaErrorNoDevice without a device) and nothing
// crashes; with one, it succeeds and describes the device.
import { afterAll, describe, expect, test } from "bun:test";
import { dlopen } from "bun:ffi";

import { ensureBuilt, hasNvcc } from "../src/native/build.ts";
import { CUDA_SYMBOLS, decodeDeviceInfo } from "../src/native/cuda-symbols.ts";
import { probeDriver } from "../src/native/driver.ts";
import { OP_SYMBOLS, PLAN_SYMBOLS, RUNTIME_SYMBOLS } from "../src/native/symbols.ts";

const NO_GPU_CODES: Record<number, string> = { 35: "cudaErrorInsufficientDriver", 100: "cudaErrorNoDevice" };

if (!hasNvcc())
  console.log("cuda-load.test.ts: skipping the CUDA library tests, nvcc not found (set NVCC or CUDA_HOME)");
describe.skipIf(!hasNvcc())("libgpt2_cuda.so", () => {
  const lib = dlopen(ensureBuilt("cuda", { quiet: true }).path, {
    ...OP_SYMBOLS,
    ...PLAN_SYMBOLS,
    ...RUNTIME_SYMBOLS,
    ...CUDA_SYMBOLS,
  });
  const fn = lib.symbols;
  const probe = probeDriver();
  const hasGpu = probe.ok && probe.devices.length > 0;
  if (!hasGpu)
    console.log(
      `cuda-load.test.ts: skipping the with-a-GPU test, no GPU: ${probe.ok ? "the driver sees no device" : probe.reason}`,
    );
  afterAll(() => lib.close());

  test.skipIf(hasGpu)("without a GPU: be_init reports why, with a name, and nothing crashes", () => {
    const code = fn.be_init(0);
    expect(Object.keys(NO_GPU_CODES).map(Number)).toContain(code);
    expect(String(fn.be_error_name(code))).toBe(NO_GPU_CODES[code]!);
    expect(String(fn.be_error_string(code)).length).toBeGreaterThan(0);
    const count = new Int32Array(1);
    expect(fn.cu_device_count(count)).not.toBe(0);
    expect(count[0]).toBe(0);
    expect(fn.be_alloc(1024)).toBeNull();
    expect(fn.be_last_error()).not.toBe(0);
  });

  test.skipIf(!hasGpu)("with a GPU: be_init succeeds and the device is described", () => {
    expect(fn.be_init(0)).toBe(0);
    const info = new Uint8Array(304);
    expect(fn.cu_device_info(0, info)).toBe(0);
    const d = decodeDeviceInfo(info);
    expect(d.smCount).toBeGreaterThan(0);
    expect(d.totalMemBytes).toBeGreaterThan(0);
    expect(d.runtimeVersion).toBeGreaterThan(0);
  });
});
