// The emulator's copy of a CUDA source (src/native/emu-source.ts): shared-memory declarations become the running
// emulated block's own memory, line for line, and any other __shared__ stops the build.
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { emuSource } from "../src/native/emu-source.ts";

const body = (text: string) => emuSource(text, "/src/k.cu").split("\n").slice(1).join("\n");

describe("emuSource", () => {
  test("opens with #line 1 naming the original, and keeps every line's number", () => {
    const text = "a\n  __shared__ float x[4];\nb\n";
    const copy = emuSource(text, "/src/k.cu").split("\n");
    expect(copy[0]).toBe('#line 1 "/src/k.cu"');
    expect(copy.slice(1).length).toBe(text.split("\n").length);
    expect(copy[3]).toBe("b");
  });

  test.each([
    ["__shared__ bool is_last;", "auto& is_last = ::emu::block_shared<bool>([] {});"],
    [
      "  __shared__ float partial[kRows][kWarpSize];",
      "  auto& partial = ::emu::block_shared<float[kRows][kWarpSize]>([] {});",
    ],
    [
      "__shared__ float tile[kTileK + 1];  // +1: banks",
      "auto& tile = ::emu::block_shared<float[kTileK + 1]>([] {});  // +1: banks",
    ],
    [
      "__shared__ MatvecShared<kWidth, kRows, input_of(op)> shared;   \\",
      "auto& shared = ::emu::block_shared<MatvecShared<kWidth, kRows, input_of(op)>>([] {});   \\",
    ],
    ["\t__shared__ const float* table;", "\tauto& table = ::emu::block_shared<const float*>([] {});"],
    ["  extern __shared__ float4 shared[];", "  float4* const shared = ::emu::dynamic_shared<float4>();"],
    [
      "extern __shared__ unsigned char bytes[ ];",
      "unsigned char* const bytes = ::emu::dynamic_shared<unsigned char>();",
    ],
  ])("%s", (declaration, translated) => {
    expect(body(declaration)).toBe(translated);
  });

  test("comments and code without __shared__ stay as they are", () => {
    const text = "// partial: __shared__ float[kWarpSize].\nint shared = 1;  // not __shared__\n";
    expect(body(text)).toBe(text);
  });

  test.each([
    ["two declarators", "__shared__ int a, b;"],
    ["a declaration after other code on its line", "if (x) { __shared__ int y; }"],
    ["a dynamic array with a size", "extern __shared__ float v[4];"],
    ["a star with the name", "__shared__ float *p;"],
  ])("%s stops the build, naming the line", (_what, line) => {
    expect(() => emuSource(`int x;\n${line}\n`, "/src/k.cu")).toThrow(/\/src\/k\.cu:2: a __shared__/);
  });

  test("every source and header under cuda/ translates", () => {
    const dir = join(import.meta.dir, "../cuda");
    const files = ["", "emu"].flatMap((sub) =>
      readdirSync(join(dir, sub))
        .filter((f) => /\.(cu|h|cpp)$/.test(f))
        .map((f) => join(dir, sub, f)),
    );
    for (const f of files) expect(() => emuSource(readFileSync(f, "utf8"), f)).not.toThrow();
  });
});
