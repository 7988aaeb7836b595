// Assertions and fixtures shared by several test files.
import { afterAll, beforeAll, expect } from "bun:test";
import chalk from "chalk";

import { UserError } from "../../src/errors.ts";

/** `fn` throws a one-line UserError matching `pattern`. */
export function expectUserError(fn: () => unknown, pattern: RegExp): void {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(UserError);
  expect((caught as Error).message).toMatch(pattern);
  expect((caught as Error).message).not.toContain("\n");
}

/** Plain text for the whole test file: chalk off, restored afterwards. */
export function withoutColour(): void {
  let savedLevel: typeof chalk.level;
  beforeAll(() => {
    savedLevel = chalk.level;
    chalk.level = 0;
  });
  afterAll(() => {
    chalk.level = savedLevel;
  });
}
