// The prefix lengths a study times without --prompt-cache: those whose prompts fit its session and whose cold
// prefill the measured rate makes quick (the measurement itself: cli-profile.test.ts).
import { expect, test } from "bun:test";

import {
  autoPrefixes,
  noAutoPrefixReason,
  PROMPT_CACHE_LIMIT_S,
  promptCacheContext,
} from "../src/profile/prompt-cache.ts";

test("1024 and its doublings within the session's positions, each cold prefill within the limit", () => {
  const atRate = (tokensPerS: number) => (tokens: number) => tokens / tokensPerS;
  // 8193 positions (a study to context 8192): 4096 + 16 + 8 fits, 8192 + 24 does not
  expect(autoPrefixes(8193, atRate(1000))).toEqual([1024, 2048, 4096]);
  expect(promptCacheContext(8192)).toBeGreaterThan(8193);
  // about a minute: at 50 tokens a second a 4112-token prefill takes 82 s, a 2064-token one 41 s
  expect(PROMPT_CACHE_LIMIT_S).toBe(60);
  expect(autoPrefixes(8193, atRate(50))).toEqual([1024, 2048]);
  expect(autoPrefixes(8193, atRate(10))).toEqual([]);
  // a study that stays short: none, whatever the rate
  expect(autoPrefixes(1001, atRate(1e9))).toEqual([]);
  expect(autoPrefixes(promptCacheContext(1024), atRate(1e9))).toEqual([1024]);
});

test("when none is chosen, the reason: the first prefix does not fit, or its cold prefill is too slow", () => {
  const atRate = (tokensPerS: number) => (tokens: number) => tokens / tokensPerS;
  expect(noAutoPrefixReason(1001, atRate(1e9))).toBe(
    `a 1024-token prefix with its suffix and generated tokens needs ${promptCacheContext(1024)} positions, and the study's largest context holds 1001`,
  );
  expect(noAutoPrefixReason(8193, atRate(10))).toMatch(
    /^a 1024-token prefix's cold prefill would take 104\.0 s at the measured prefill rate, over 60 s$/,
  );
});
