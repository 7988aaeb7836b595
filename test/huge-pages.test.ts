// How the weights and the read passes' buffer are paged (src/backends/huge-pages.ts): the mappings of
// /proc/self/smaps that a buffer overlaps, each counted once, on a written smaps text; then on a buffer of the CPU
// library's, written whole.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";

import { CpuBackend } from "../src/backends/cpu.ts";
import { hostPageShares, hugeShare, hugeShareText, pagesOfMappings } from "../src/backends/huge-pages.ts";

const KIB = 1024;

/** An smaps entry: its header, then the fields the parser reads among others it skips. */
const mapping = (start: number, end: number, rssKib: number, hugeKib: number) =>
  [
    `${start.toString(16)}-${end.toString(16)} rw-p 00000000 00:00 0 `,
    `Size:           ${(end - start) / KIB} kB`,
    `Rss:            ${rssKib} kB`,
    `Pss:            ${rssKib} kB`,
    `AnonHugePages:  ${hugeKib} kB`,
    "THPeligible:    1",
    "VmFlags: rd wr mr mw me ac sd hg",
  ].join("\n");

const M = 2 ** 21; // 2 MiB
const SMAPS = [
  mapping(0x7f0000000000, 0x7f0000000000 + 4 * M, 8192, 8192), // 8 MiB resident, all huge
  mapping(0x7f0000000000 + 4 * M, 0x7f0000000000 + 6 * M, 4096, 0), // 4 MiB on 4 KiB pages
  mapping(0x7f0000000000 + 8 * M, 0x7f0000000000 + 12 * M, 6144, 2048),
  "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]",
  "Rss:             132 kB",
  "AnonHugePages:     0 kB",
].join("\n");
const BASE = 0x7f0000000000;

describe("pagesOfMappings", () => {
  test("a range inside one mapping counts that mapping whole (it may hold neighbours)", () => {
    expect(pagesOfMappings(SMAPS, [[BASE + M, BASE + M + 4096]])).toEqual({ resident: 8192 * KIB, huge: 8192 * KIB });
  });

  test("a range across two mappings counts both; one that ends where a mapping starts does not count it", () => {
    expect(pagesOfMappings(SMAPS, [[BASE + 3 * M, BASE + 5 * M]])).toEqual({
      resident: (8192 + 4096) * KIB,
      huge: 8192 * KIB,
    });
    expect(pagesOfMappings(SMAPS, [[BASE + 6 * M, BASE + 8 * M]])).toEqual({ resident: 0, huge: 0 });
  });

  test("a mapping two ranges overlap is counted once; the fields of others (the stack's) are not", () => {
    const share = pagesOfMappings(SMAPS, [
      [BASE + 8 * M, BASE + 9 * M],
      [BASE + 10 * M, BASE + 11 * M],
    ]);
    expect(share).toEqual({ resident: 6144 * KIB, huge: 2048 * KIB });
    expect(hugeShare(share)).toBeCloseTo(1 / 3, 12);
    expect(hugeShareText(share)).toBe("33%");
  });

  test("nothing resident reads as such, not as 0%", () => {
    const none = pagesOfMappings(SMAPS, []);
    expect(none).toEqual({ resident: 0, huge: 0 });
    expect(hugeShare(none)).toBe(0);
    expect(hugeShareText(none)).toBe("none resident");
  });
});

describe.skipIf(!existsSync("/proc/self/smaps"))("hostPageShares on the CPU library's buffers", () => {
  let cpu: CpuBackend;
  beforeAll(() => {
    cpu = CpuBackend.open();
  });
  afterAll(() => cpu.close());

  test("a buffer written whole is resident in its mappings, huge pages a part of that", () => {
    const bytes = 8 * M;
    const buffer = cpu.alloc(bytes, "whole");
    try {
      cpu.upload(buffer, new Uint8Array(bytes).fill(1));
      const share = hostPageShares([[buffer]])![0]!;
      expect(share.resident).toBeGreaterThanOrEqual(bytes);
      expect(share.huge).toBeGreaterThanOrEqual(0);
      expect(share.huge).toBeLessThanOrEqual(share.resident);
      expect(share.huge % (2 * M)).toBe(0);
    } finally {
      cpu.free(buffer);
    }
  });
});
