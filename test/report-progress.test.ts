import { describe, expect, test } from "bun:test";
import { createProgress, type ProgressStream } from "../src/report/progress.ts";

function capture(isTTY: boolean): ProgressStream & { text: () => string } {
  const chunks: string[] = [];
  return { isTTY, write: (t: string) => chunks.push(t) > 0, text: () => chunks.join("") };
}

describe("createProgress", () => {
  test("without a TTY: a plain line at most every interval, and a final line", () => {
    const stream = capture(false);
    let clock = 0;
    const p = createProgress({ total: 10, label: "profile", stream, plainIntervalMs: 5000, now: () => clock });
    p.update(1, "eager, context 1");
    clock = 1000;
    p.update(2, "eager, context 16"); // too soon: not printed
    clock = 6000;
    p.update(3, "graph, context 1");
    clock = 12_500;
    p.update(10);
    p.stop();
    expect(stream.text()).toBe(
      [
        "profile: 1/10 (10%) eager, context 1",
        "profile: 3/10 (30%) graph, context 1",
        "profile: 10/10 (100%)",
        "profile: 10/10 done in 12.5 s",
        "",
      ].join("\n"),
    );
  });

  test("a run under a second says its hundredths", () => {
    const stream = capture(false);
    let clock = 0;
    const p = createProgress({ total: 2, label: "profile", stream, now: () => clock });
    clock = 42;
    p.update(2);
    p.stop();
    expect(stream.text()).toEndWith("profile: 2/2 done in 0.04 s\n");
  });

  test("from the command's start where given: a study whose setup took the time says so", () => {
    const stream = capture(false);
    let clock = 15_960;
    const p = createProgress({ total: 3, label: "profile", stream, now: () => clock, startedAt: 0 });
    clock = 16_000;
    p.update(3);
    p.stop();
    expect(stream.text()).toEndWith("profile: 3/3 done, 16.0 s after the command started\n");
  });

  test("silent writes nothing", () => {
    const stream = capture(false);
    const p = createProgress({ total: 3, label: "x", stream, silent: true });
    p.update(1);
    p.stop();
    expect(stream.text()).toBe("");
  });

  test("on a TTY: a cli-progress bar with the count and the detail", () => {
    const stream = capture(true);
    const p = createProgress({ total: 4, label: "profile", stream });
    p.update(3, "graph, context 64");
    p.stop();
    expect(stream.text()).toContain("3/4");
    expect(stream.text()).toContain("graph, context 64");
  });
});
