// Counts in prose: singular for one, the plural otherwise.
import { expect, test } from "bun:test";

import { counted } from "../src/words.ts";

test("one is singular, every other count plural, grouped in thousands", () => {
  expect(counted(1, "thread")).toBe("1 thread");
  expect(counted(2, "thread")).toBe("2 threads");
  expect(counted(0, "token")).toBe("0 tokens");
  expect(counted(8192, "token")).toBe("8,192 tokens");
  expect(counted(1, "K/V head")).toBe("1 K/V head");
});
