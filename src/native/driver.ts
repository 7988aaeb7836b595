// The CUDA driver API reached directly through bun:ffi, loaded lazily so that a machine without a
// driver never fails at import: is there a driver, and which devices does it see.
import { CString, dlopen, FFIType } from "bun:ffi";

const { i32, ptr } = FFIType;

const DRIVER_SYMBOLS = {
  cuInit: { args: [i32], returns: i32 },
  cuDriverGetVersion: { args: [ptr], returns: i32 },
  cuDeviceGetCount: { args: [ptr], returns: i32 },
  cuDeviceGet: { args: [ptr, i32], returns: i32 },
  cuDeviceGetName: { args: [ptr, i32, i32], returns: i32 },
  cuDeviceTotalMem_v2: { args: [ptr, i32], returns: i32 },
  cuGetErrorName: { args: [i32, ptr], returns: i32 },
} as const;

const LIBRARY_NAMES = ["libcuda.so.1", "libcuda.so"];

type Driver = ReturnType<typeof dlopen<typeof DRIVER_SYMBOLS>>["symbols"];
let loaded: { driver: Driver } | { error: string } | undefined;

function load(): { driver: Driver } | { error: string } {
  if (loaded) return loaded;
  for (const name of LIBRARY_NAMES) {
    try {
      loaded = { driver: dlopen(name, DRIVER_SYMBOLS).symbols };
      return loaded;
    } catch {
      // try the next name
    }
  }
  loaded = { error: `no CUDA driver (could not load ${LIBRARY_NAMES.join(" or ")})` };
  return loaded;
}

function errorName(driver: Driver, code: number): string {
  const out = new BigUint64Array(1);
  if (driver.cuGetErrorName(code, out) !== 0 || out[0] === 0n) return `CUDA driver error ${code}`;
  return new CString(Number(out[0]) as never).toString();
}

export interface DriverDevice {
  index: number;
  name: string;
  totalBytes: number;
}

export type DriverProbe = { ok: true; driverVersion: number; devices: DriverDevice[] } | { ok: false; reason: string };

/** Is there a driver and at least one device? Never throws. */
export function probeDriver(): DriverProbe {
  const lib = load();
  if ("error" in lib) return { ok: false, reason: lib.error };
  const d = lib.driver;
  const init = d.cuInit(0);
  if (init !== 0) return { ok: false, reason: `the CUDA driver did not initialise (${errorName(d, init)})` };
  const word = new Int32Array(1);
  d.cuDriverGetVersion(word);
  const driverVersion = word[0]!;
  if (d.cuDeviceGetCount(word) !== 0 || word[0] === 0) return { ok: false, reason: "the CUDA driver sees no device" };
  const devices: DriverDevice[] = [];
  for (let i = 0; i < word[0]!; i++) {
    const handle = new Int32Array(1);
    d.cuDeviceGet(handle, i);
    const name = new Uint8Array(256);
    d.cuDeviceGetName(name, name.length, handle[0]!);
    const total = new BigUint64Array(1);
    d.cuDeviceTotalMem_v2(total, handle[0]!);
    devices.push({
      index: i,
      name: new TextDecoder().decode(name.subarray(0, name.indexOf(0))),
      totalBytes: Number(total[0]),
    });
  }
  return { ok: true, driverVersion, devices };
}
