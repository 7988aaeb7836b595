// The launch floor measured with empty kernels and a grid barrier, as the modes and the verdicts use it: each
// launch mode's per-op floor is its own measured cost, and the launch verdict counts the persistent step's
// barriers only where the persistent step ran (the fused plan).
import { describe, expect, test } from "bun:test";

import type { LaunchFloor } from "../src/backends/instrument.ts";
import type { StudyPoint } from "../src/profile/types.ts";
import { launchVerdict } from "../src/profile/verdicts.ts";
import { launchMode } from "../src/run/launch-modes.ts";

const launch: LaunchFloor = {
  host_us: 2.5,
  device_us: 1.2,
  graph_node_us: 0.8,
  pdl_node_us: 0.5,
  grid_barrier_us: 0.7,
  grid_barrier_skewed_us: 0.6,
  grid_barrier_sc_us: 1.6,
  grid_barrier_sc_skewed_us: 2.1,
  how_measured: "synthetic",
};
const cpu: LaunchFloor = {
  host_us: 0.05,
  device_us: null,
  graph_node_us: null,
  pdl_node_us: null,
  grid_barrier_us: null,
  grid_barrier_skewed_us: null,
  grid_barrier_sc_us: null,
  grid_barrier_sc_skewed_us: null,
  how_measured: "synthetic",
};

describe("the launch floor per mode", () => {
  test("each mode's per-op floor is its own measured dispatch: a call, a graph node, a programmatic node, a barrier", () => {
    expect(launchMode("eager").floorUs(launch, null)).toBe(2.5);
    expect(launchMode("eager").floorUs(launch, 4)).toBe(4); // the interpreter's issue time per op, when longer
    expect(launchMode("eager-native").floorUs(launch, null)).toBe(2.5);
    expect(launchMode("graph").floorUs(launch, null)).toBe(0.8);
    expect(launchMode("graph-pdl").floorUs(launch, null)).toBe(0.5);
    expect(launchMode("persistent").floorUs(launch, null)).toBe(0.7);
  });

  test("the persistent step's barrier is the dearer of its two arrival patterns, never the sequentially consistent design's", () => {
    expect(launchMode("persistent").floorUs({ ...launch, grid_barrier_skewed_us: 1.1 }, null)).toBe(1.1);
    expect(launchMode("persistent").floorUs({ ...launch, grid_barrier_skewed_us: null }, null)).toBe(0.7);
  });

  test("where a cost was not measured, the next one stands in (graph-pdl: the graph node; persistent: nothing)", () => {
    expect(launchMode("graph-pdl").floorUs({ ...launch, pdl_node_us: null }, null)).toBe(0.8);
    expect(launchMode("graph-pdl").floorUs(cpu, null)).toBe(0.05);
    expect(launchMode("persistent").floorUs(cpu, null)).toBe(0);
  });
});

describe("the launch verdict", () => {
  const point = (mode: StudyPoint["mode"], ms: number) =>
    ({ mode, context: 512, device_ms: { median: ms } }) as unknown as StudyPoint;
  const opsOf = () => 62;

  test("counts the step's ops at each measured cost, and the persistent step's barriers (one fewer) where it ran", () => {
    const [line] = launchVerdict([point("graph", 0.2), point("persistent", 0.15)], launch, opsOf);
    expect(line).toContain("62 ops × 2.50 us per empty launch = 0.155 ms of host time per step");
    expect(line).toContain("; as graph nodes, 62 × 0.80 us = 0.050 ms");
    expect(line).toContain("; as graph-pdl nodes, 62 × 0.50 us = 0.031 ms");
    expect(line).toContain("; as the persistent step's grid barriers, 61 × 0.70 us = 0.043 ms");
    expect(line).toContain("against a fastest cached step of 0.150 ms");
  });

  test("no barriers where the persistent step did not run (the unfused plan), no node costs where none were measured", () => {
    const [unfused] = launchVerdict([point("graph", 0.2)], launch, opsOf);
    expect(unfused).not.toContain("grid barriers");
    const [onCpu] = launchVerdict([point("eager", 30)], cpu, opsOf);
    expect(onCpu).not.toContain("graph");
    expect(onCpu).not.toContain("barriers");
  });
});
