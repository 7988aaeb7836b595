// The C structs TypeScript reads field by field: every size and offset in the TS layout tables
// (src/native/struct-layout.ts users) against sizeof and offsetof from the C headers, compiled here with g++.
import { beforeAll, describe, expect, test } from "bun:test";

import { CAPTURE_KINDS } from "../src/backends/cuda.ts";
import { CU_DEVICE_INFO, CU_LAUNCH_SHAPE } from "../src/native/cuda-symbols.ts";
import { TRACE_API, TRACE_KERNEL } from "../src/native/cupti.ts";
import { CU_KERNEL_FACTS } from "../src/native/kernel-facts.ts";
import { fieldBytes, type StructLayout } from "../src/native/struct-layout.ts";
import { compileAndRun } from "./helpers/cpp.ts";

const LAYOUTS: StructLayout[] = [CU_DEVICE_INFO, CU_LAUNCH_SHAPE, CU_KERNEL_FACTS, TRACE_KERNEL, TRACE_API];

/** "<struct> <field|sizeof> <bytes>" lines printed by a program compiled from the C headers. */
function measuredLayouts(): Map<string, number> {
  const headers = [...new Set(LAYOUTS.map((l) => l.header))].map((h) => `#include "${h}"`);
  const prints = LAYOUTS.flatMap((l) => [
    `printf("${l.struct} sizeof %zu\\n", sizeof(${l.struct}));`,
    ...Object.keys(l.fields).map((f) => `printf("${l.struct} ${f} %zu\\n", offsetof(${l.struct}, ${f}));`),
  ]);
  const captures = Object.keys(CAPTURE_KINDS).map(
    (k) => `printf("capture ${k} %d\\n", (int)CU_CAPTURE_${k.toUpperCase()});`,
  );
  const source = [
    "#include <cstddef>",
    "#include <cstdio>",
    ...headers,
    '#include "cuda_api.h"',
    `int main() {\n${[...prints, ...captures].join("\n")}\n}`,
  ].join("\n");
  const lines = compileAndRun("layout", source).trim().split("\n");
  return new Map(
    lines.map((line) => {
      const [struct, field, value] = line.split(" ");
      return [`${struct}.${field}`, Number(value)];
    }),
  );
}

describe("C struct layouts read from TypeScript", () => {
  let measured: Map<string, number>;
  beforeAll(() => {
    measured = measuredLayouts();
  });
  test.each(LAYOUTS.map((l) => [l.struct, l] as const))(
    "%s: size and every field offset match the C header",
    (_, layout) => {
      expect(measured.get(`${layout.struct}.sizeof`)).toBe(layout.bytes);
      for (const [field, offset] of Object.entries(layout.fields))
        expect([field, measured.get(`${layout.struct}.${field}`)]).toEqual([field, offset]);
    },
  );

  test("cu_graph_capture's kinds are CU_CAPTURE_* of cuda/cuda_api.h", () => {
    for (const [kind, value] of Object.entries(CAPTURE_KINDS))
      expect([kind, measured.get(`capture.${kind}`)]).toEqual([kind, value]);
  });

  test("a name field's capacity runs to the next field or the struct's end", () => {
    expect(fieldBytes(CU_DEVICE_INFO, "name")).toBe(256);
    expect(fieldBytes(TRACE_KERNEL, "name")).toBe(128);
    expect(fieldBytes(TRACE_API, "name")).toBe(64);
  });
});
