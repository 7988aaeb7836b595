// Counts in prose: "1 token", "2 tokens"; a context past the model's longest.

/** `n` and its noun, singular for one: counted(1, "thread") is "1 thread", counted(2, "thread") "2 threads". */
export const counted = (n: number, noun: string, plural = `${noun}s`): string =>
  `${n.toLocaleString("en-US")} ${n === 1 ? noun : plural}`;

/** " (past the model's 127-token context)" where `context` is past `longest`, else nothing: said where a formula reaches it. */
export const pastModel = (context: number, longest: number): string =>
  context > longest ? ` (past the model's ${longest.toLocaleString("en-US")}-token context)` : "";
