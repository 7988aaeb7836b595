// Counts in prose: singular for one, the plural otherwise.
import { expect, test } from "bun:test";

import { counted, pastModel } from "../src/words.ts";

test("one is singular, every other count plural, grouped in thousands", () => {
  expect(counted(1, "thread")).toBe("1 thread");
  expect(counted(2, "thread")).toBe("2 threads");
  expect(counted(0, "token")).toBe("0 tokens");
  expect(counted(8192, "token")).toBe("8,192 tokens");
  expect(counted(1, "K/V head")).toBe("1 K/V head");
});

test("a context past the model's longest is said so, with the longest; one within it says nothing", () => {
  expect(pastModel(1677, 127)).toBe(" (past the model's 127-token context)");
  expect(pastModel(40_970, 32_767)).toBe(" (past the model's 32,767-token context)");
  expect(pastModel(127, 127)).toBe("");
});
