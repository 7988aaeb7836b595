// The code is formatted and lint-clean: Biome for TypeScript and JSON (biome.jsonc), clang-format for C++ and CUDA
// (.clang-format), both pinned in package-lock.json. `npm run format` fixes what this finds.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { biomeProblems, cppSources, unformattedCpp } from "../src/cli/format.ts";

describe("format and lint", () => {
  test("Biome finds nothing to format or lint", () => {
    expect(biomeProblems()).toBe("");
  });

  test("every C++ and CUDA source is clang-formatted", () => {
    expect(cppSources().length).toBeGreaterThan(20);
    expect(unformattedCpp(cppSources())).toEqual([]);
  });

  test("the C++ check finds an unformatted file", () => {
    const dir = mkdtempSync(join(tmpdir(), "format-"));
    const file = join(dir, "bad.cu");
    writeFileSync(file, "int  f( int a ){return a;}\n");
    try {
      expect(unformattedCpp([file])).toEqual([file]);
    } finally {
      rmSync(dir, { recursive: true });
    }
  });
});
