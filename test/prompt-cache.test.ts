// The prefix lengths a study times without --prompt-cache: those whose prompts fit its session and whose cold
// prefill the measured rate makes quick (the measurement itself: cli-profile.test.ts).
import { expect, test } from "bun:test";

import { PREFILL_LIMIT_S } from "../src/profile/fill.ts";
import { autoPrefixes, noAutoPrefixReason, promptCacheContext } from "../src/profile/prompt-cache.ts";

test("1024 and its doublings within the session's positions, each cold prefill within the limit", () => {
  const atRate = (tokensPerS: number) => (tokens: number) => tokens / tokensPerS;
  // 8193 positions (a study to context 8192): 4096 + 16 + 8 fits, 8192 + 24 does not
  expect(autoPrefixes(8193, atRate(1000))).toEqual([1024, 2048, 4096]);
  expect(promptCacheContext(8192)).toBeGreaterThan(8193);
  // at 300 tokens a second a 4112-token prefill takes 13.7 s
  expect(PREFILL_LIMIT_S).toBe(10);
  expect(autoPrefixes(8193, atRate(300))).toEqual([1024, 2048]);
  expect(autoPrefixes(8193, atRate(50))).toEqual([]);
  // a study that stays short: none, whatever the rate
  expect(autoPrefixes(1001, atRate(1e9))).toEqual([]);
  expect(autoPrefixes(promptCacheContext(1024), atRate(1e9))).toEqual([1024]);
});

test("when none is chosen, the reason: the first prefix does not fit, or its cold prefill is too slow", () => {
  const atRate = (tokensPerS: number) => (tokens: number) => tokens / tokensPerS;
  expect(noAutoPrefixReason(1001, atRate(1e9))).toBe(
    `a 1024-token prefix with its suffix and generated tokens needs ${promptCacheContext(1024)} positions, and the study's largest context holds 1001`,
  );
  expect(noAutoPrefixReason(8193, atRate(50))).toMatch(
    /^a 1024-token prefix's cold prefill would take 20\.\d s at the measured prefill rate, over 10 s$/,
  );
});
