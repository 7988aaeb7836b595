// The CUDA kernels' own source (cuda/*.cu compiled by g++ against the CPU emulator, libgpt2_emu.so)
// against the CPU twins (cuda/*.cpp, libgpt2_cpu.so), op by op, on fresh random inputs, with every
// output poisoned with NaN first so that an element the kernel never writes fails. The cases are
// src/verify/kernel-checks.ts, the same ones `bun run verify` runs on a GPU.
//
// Every case runs twice, the emulator's blocks and threads in two different seeded random orders
// (emu_set_schedule), and the two runs' device outputs must agree bit for bit: the merges across blocks are
// in a fixed order, whichever block arrives last.
//
// Planted bugs, each in a variant library built with a macro, and each shown to FAIL here:
//   libgpt2_emu_planted.so, -DPLANT_BUG_ATTENTION: attention.cu drops each query's own key from its causal
//     range (an indexing bug);
//   libgpt2_emu_planted_order.so, -DPLANT_MISSING_BARRIER (arrive_last's barrier after thread 0 learns whether
//     its block is the last: attention's merge) and -DPLANT_BLOCK_ORDER (the matvec lets its highest split merge,
//     assuming that block finishes last). Both pass with blocks and threads in index order and fail in a random
//     order: the random schedule is what catches them.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { dlopen, FFIType } from "bun:ffi";

import { CpuBackend } from "../src/backends/cpu.ts";
import { CudaBackend } from "../src/backends/cuda.ts";
import { ensureBuilt } from "../src/native/build.ts";
import { emuSchedule } from "../src/native/emu-schedule.ts";
import { DTYPES } from "../src/ops.ts";
import { encodePlan, planOp, type PlanOp } from "../src/plan.ts";
import { attentionCase, KERNEL_CASES, KERNEL_TOLERANCE, runKernelCases } from "../src/verify/kernel-checks.ts";
import { DeviceArena, freshSeed } from "./helpers/device.ts";
import { maxRelativeError, randomFloats } from "./helpers/reference.ts";

const seed = freshSeed();
// the two schedules: nonzero and different (0 would be index order)
const [order1, order2] = [(seed % 0x7fffffff) + 1, ((seed * 7 + 3) % 0x7fffffff) + 1];
console.log(`kernels.emu: SEED=${seed}, schedules ${order1} and ${order2}`);
const emu = CudaBackend.open({ emulated: true });
const cpu = CpuBackend.open();
const schedule = emuSchedule(ensureBuilt("emu", { quiet: true }).path);
afterAll(() => {
  schedule.close();
  emu.close();
  cpu.close();
});

describe("emulated kernels vs CPU twins, in two random schedules", () => {
  test.each(KERNEL_CASES.map((c) => [`${c.kernel} ${c.shape}`, c] as const))("%s", (_, c) => {
    schedule.set(order1);
    const [row] = runKernelCases(emu, cpu, seed, [c], () => schedule.set(order2));
    expect(row!.error).toBeLessThanOrEqual(KERNEL_TOLERANCE);
    expect(row!.repeatable).toBe(true);
  });
});

describe("split-key attention's scratch", () => {
  const C = 128,
    nHead = 2,
    maxCtx = 64;
  const arena = new DeviceArena(emu);
  const reference = new DeviceArena(cpu);
  afterAll(() => {
    arena.release();
    reference.release();
  });

  test("the merging blocks leave every arrival counter at zero, so one scratch serves successive steps", () => {
    const scratch = arena.zeroed(emu.attentionScratchBytes(1, C, nHead, nHead, maxCtx) / 4);
    const k = randomFloats(maxCtx * C, seed + 30),
      v = randomFloats(maxCtx * C, seed + 31);
    const caches = { emu: [arena.put(k), arena.put(v)], cpu: [reference.put(k), reference.put(v)] };
    for (const pos of [0, 1, 40, 63]) {
      const qkv = randomFloats(3 * C, seed + 32 + pos);
      const step = (a: DeviceArena, [kc, vc]: typeof caches.emu, scratchPtr: number) => {
        const out = a.poisoned(C),
          state = a.put(Int32Array.of(pos, 0, 0, 0)),
          q = a.put(qkv);
        a.backend.ops.op_kv_append(kc!.ptr, vc!.ptr, q.ptr, state.ptr, 1, 1, C, C, maxCtx, DTYPES.f32);
        a.backend.ops.op_attention(
          out.ptr,
          scratchPtr,
          q.ptr,
          kc!.ptr,
          vc!.ptr,
          state.ptr,
          1,
          1,
          C,
          nHead,
          nHead,
          maxCtx,
          DTYPES.f32,
        );
        return a.floats(out);
      };
      expect(
        maxRelativeError(step(arena, caches.emu, scratch.ptr), step(reference, caches.cpu, 0)),
      ).toBeLessThanOrEqual(KERNEL_TOLERANCE);
      expect(arena.ints(scratch, nHead).every((counter) => counter === 0)).toBe(true); // counters lead the scratch
    }
  });

  test("steps of different T share one scratch (a prefill after decode steps, as in every second generation)", () => {
    const scratch = arena.zeroed(emu.attentionScratchBytes(maxCtx, C, nHead, nHead, maxCtx) / 4);
    const k = randomFloats(maxCtx * C, seed + 33),
      v = randomFloats(maxCtx * C, seed + 34);
    const caches = { emu: [arena.put(k), arena.put(v)], cpu: [reference.put(k), reference.put(v)] };
    for (const [T, pos] of [
      [7, 0],
      [1, 7],
      [1, 8],
      [40, 0],
      [1, 40],
      [7, 0],
    ] as const) {
      const qkv = randomFloats(T * 3 * C, seed + 35 + T + pos);
      const step = (a: DeviceArena, [kc, vc]: typeof caches.emu, scratchPtr: number) => {
        const out = a.poisoned(T * C),
          state = a.put(Int32Array.of(pos, 0, 0, 0)),
          q = a.put(qkv);
        a.backend.ops.op_kv_append(kc!.ptr, vc!.ptr, q.ptr, state.ptr, 1, T, C, C, maxCtx, DTYPES.f32);
        a.backend.ops.op_attention(
          out.ptr,
          scratchPtr,
          q.ptr,
          kc!.ptr,
          vc!.ptr,
          state.ptr,
          1,
          T,
          C,
          nHead,
          nHead,
          maxCtx,
          DTYPES.f32,
        );
        return a.floats(out);
      };
      expect(
        maxRelativeError(step(arena, caches.emu, scratch.ptr), step(reference, caches.cpu, 0)),
      ).toBeLessThanOrEqual(KERNEL_TOLERANCE);
    }
  });
});

describe("graphs and replay on the emulator", () => {
  test("a captured plan replays like eager launches, one kernel node per op", () => {
    const arena = new DeviceArena(emu);
    const N = 1000;
    const a = arena.put(randomFloats(N, seed + 40)),
      b = arena.put(randomFloats(N, seed + 41));
    const eager = arena.poisoned(N),
      graphed = arena.poisoned(N);
    const ops = (out: number): PlanOp[] => [
      planOp("gelu", "gelu", null, { out, inp: a.ptr, N }),
      planOp("residual", "residual", null, { out, a: out, b: b.ptr, N }),
    ];
    emu.record(encodePlan(ops(eager.ptr))).runNative(1);
    const graph = emu.record(encodePlan(ops(graphed.ptr)));
    expect(graph.graphKernelNodes!()).toBe(2);
    expect(Number.isNaN(arena.floats(graphed)[0]!)).toBe(true); // capture records without running
    graph.runGraph!(1);
    expect(Array.from(arena.floats(graphed))).toEqual(Array.from(arena.floats(eager)));
    graph.destroy();
    arena.release();
  });

  test("the launch floor: empty kernels eagerly and as graph nodes (plain and programmatic) give positive per-launch costs", () => {
    const l = emu.measureLaunch(100);
    expect(l.hostUs).toBeGreaterThan(0);
    expect(l.eagerDeviceUs).toBeGreaterThan(0);
    expect(l.graphNodeUs).toBeGreaterThan(0);
    expect(l.pdlNodeUs).toBeGreaterThan(0);
  });

  test("the grid barrier: n in a row among every resident block (the emulator's 4), a positive cost each; none is an error", () => {
    const b = emu.measureGridBarrier(20);
    expect(b.blocks).toBe(4);
    expect(b.us).toBeGreaterThan(0);
    expect(() => emu.measureGridBarrier(0)).toThrow(/grid barrier measurement/);
  });

  test("device info describes the emulated device", () => {
    expect(emu.deviceName).toBe("CPU emulation of CUDA");
    expect(emu.device.smCount).toBeGreaterThan(0);
  });
});

describe("emulator: misuse is an error, not a hang (emu_selftest in cuda/emu/emu_selftest.cpp)", () => {
  const selftest = dlopen(ensureBuilt("emu", { quiet: true }).path, {
    emu_selftest: { args: [FFIType.i32], returns: FFIType.i32 },
  });
  afterAll(() => selftest.close());
  test.each([
    [0, "barriers and shuffles every thread reaches", 0],
    [1, "a block of 1025 threads", 9], // cudaErrorInvalidConfiguration
    [2, "__syncthreads after half the block returned", 719], // cudaErrorLaunchFailure
    [3, "half a warp at a shuffle, half at __syncthreads", 719],
    [5, "a grid barrier in a normal launch (blocks one after another)", 719],
    [6, "a cooperative grid barrier one block never arrives at", 719],
    [7, "a cooperative launch of 5 blocks x 256 threads (over 1024)", 720], // cudaErrorCooperativeLaunchTooLarge
    [11, "48 KiB + 1 byte of static shared memory", 719],
  ])("case %d: %s → %d", (which, _what, code) => {
    expect(selftest.symbols.emu_selftest(which)).toBe(code);
  });
});

describe("emulator: cooperative launches meet at grid barriers, each block with its own shared memory (emu_selftest in cuda/emu/emu_selftest.cpp)", () => {
  const selftest = dlopen(ensureBuilt("emu", { quiet: true }).path, {
    emu_selftest: { args: [FFIType.i32], returns: FFIType.i32 },
    emu_selftest_arrival_order: { args: [], returns: FFIType.i64 },
  });
  afterAll(() => selftest.close());
  const gridBarrier = 4,
    gridBarrierInGraph = 8; // 0: every block summed every block's slots right; -1: wrong sums
  const sharedPerBlock = 9,
    sharedStartsPoisoned = 10; // 0: as said; -1: a block read what it should not

  test.each([0, order1, order2])("4 blocks x 256 threads, 3 phases, schedule %d: the sums are right", (order) => {
    schedule.set(order);
    expect(selftest.symbols.emu_selftest(gridBarrier)).toBe(0);
  });

  test.each([0, order1])("captured on a stream and replayed as a graph, schedule %d: still cooperative", (order) => {
    schedule.set(order);
    expect(selftest.symbols.emu_selftest(gridBarrierInGraph)).toBe(0);
  });

  test.each([0, order1, order2])(
    "2 blocks, schedule %d: each keeps its own shared memory, static and dynamic, across a wait",
    (order) => {
      schedule.set(order);
      expect(selftest.symbols.emu_selftest(sharedPerBlock)).toBe(0);
    },
  );

  test.each([0, order1])(
    "blocks one after another, schedule %d: the first finds shared memory poisoned, the next what it left",
    (order) => {
      schedule.set(order);
      expect(selftest.symbols.emu_selftest(sharedStartsPoisoned)).toBe(0);
    },
  );

  test("two seeds interleave the blocks differently at the barriers, and both sum right", () => {
    const arrivals = [1, 2].map((order) => {
      schedule.set(order);
      expect(selftest.symbols.emu_selftest(gridBarrier)).toBe(0);
      return Number(selftest.symbols.emu_selftest_arrival_order());
    });
    expect(arrivals[0]).not.toBe(arrivals[1]);
  });
});

/**
 * A planted test first builds its variant of the emulator library: minutes of g++ when other work keeps both cores
 * busy (300 s ran out with four processes on them), so a hang guard, not a time anyone waits for.
 */
const PLANTED_BUILD_TIMEOUT_MS = 900_000;

test(
  "planted attention bug (-DPLANT_BUG_ATTENTION) is caught",
  () => {
    const path = ensureBuilt("emu", { quiet: true, extraFlags: ["-DPLANT_BUG_ATTENTION"], variant: "planted" }).path;
    const planted = CudaBackend.open({ emulated: true, path });
    try {
      const rows = runKernelCases(planted, cpu, seed, [
        attentionCase(1, 700, 768, 12, 1024),
        attentionCase(3, 61, 768, 12, 1024),
      ]);
      for (const row of rows) expect(row.error).toBeGreaterThan(KERNEL_TOLERANCE);
    } finally {
      planted.close();
    }
  },
  PLANTED_BUILD_TIMEOUT_MS,
);

describe("planted schedule bugs pass in index order and are caught in a random order", () => {
  let planted: CudaBackend, plantedSchedule: ReturnType<typeof emuSchedule>;
  beforeAll(() => {
    const flags = ["-DPLANT_MISSING_BARRIER", "-DPLANT_BLOCK_ORDER"];
    const path = ensureBuilt("emu", { quiet: true, extraFlags: flags, variant: "planted_order" }).path;
    planted = CudaBackend.open({ emulated: true, path });
    plantedSchedule = emuSchedule(path);
  }, PLANTED_BUILD_TIMEOUT_MS);
  afterAll(() => {
    plantedSchedule?.close();
    planted?.close();
  });
  const errorIn = (order: number, c: (typeof KERNEL_CASES)[number]) => {
    plantedSchedule.set(order);
    return runKernelCases(planted, cpu, seed, [c])[0]!.error;
  };
  const byName = (kernel: string, shape: string) => KERNEL_CASES.find((c) => c.kernel === kernel && c.shape === shape)!;

  test.each([
    ["block order (-DPLANT_BLOCK_ORDER): the matvec's highest split merges", byName("linear", "T=1 C=768 OC=768")],
    ["missing barrier (-DPLANT_MISSING_BARRIER): attention's merge", attentionCase(1, 700, 768, 12, 1024)],
  ] as const)("%s", (_, c) => {
    expect(errorIn(0, c)).toBeLessThanOrEqual(KERNEL_TOLERANCE);
    expect(errorIn(order1, c)).toBeGreaterThan(KERNEL_TOLERANCE);
  });
});
