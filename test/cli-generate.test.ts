// `bun run generate` as a user runs it: the JSON contract, --dump-logits, prompt caching, and one clear line (exit ≠ 0,
// no stack trace) for each kind of bad input.
import { afterAll, describe, expect, test } from "bun:test";
import { copyFileSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { freemem, tmpdir } from "node:os";
import { join } from "node:path";

import { ROOT, runCli } from "./helpers/cli.ts";
import { maxRelativeError } from "./helpers/reference.ts";

const FIXTURE = join(import.meta.dir, "fixtures/gpt2-tiny");
const expected = JSON.parse(readFileSync(join(FIXTURE, "expected.json"), "utf8")) as {
  prompt: number[];
  generated: number[];
  sequence: number[];
};

const generate = (...args: string[]) => runCli("generate", args);

const tinyArgs = ["--model", FIXTURE, "--backend", "cpu", "--prompt-ids", expected.prompt.join(",")];

describe("generate: output contract", () => {
  test("--json prints one object with prompt_ids, generated_ids, backend, cache and per-token times", () => {
    const r = generate(...tinyArgs, "--max-new-tokens", "48", "--json", "--mode", "replay");
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.prompt_ids).toEqual(expected.prompt);
    expect(out.generated_ids).toEqual(expected.generated);
    expect(out.backend).toBe("cpu");
    expect(out.cache).toBe("on");
    expect(out.mode).toBe("eager-native");
    expect(out.token_ms).toHaveLength(48);
    expect(out.token_ms.every((ms: number) => ms > 0)).toBe(true);
    // TTFT is the prompt's step, TPOT the mean of the 47 after it
    expect(out.ttft_ms).toBe(out.token_ms[0]);
    const rest = out.token_ms.slice(1).reduce((a: number, b: number) => a + b, 0);
    expect(out.tpot_ms).toBeCloseTo(rest / 47, 9);
  });

  test("an untimed warm-up request comes first unless --cold; the tokens are the same either way", () => {
    const args = [...tinyArgs, "--max-new-tokens", "12", "--json"];
    const [warm, cold] = [generate(...args), generate(...args, "--cold")];
    expect([warm.code, cold.code]).toEqual([0, 0]);
    expect(JSON.parse(warm.stdout).warmed_up).toBe(true);
    expect(JSON.parse(cold.stdout).warmed_up).toBe(false);
    expect(JSON.parse(warm.stdout).generated_ids).toEqual(JSON.parse(cold.stdout).generated_ids);
    expect(JSON.parse(warm.stdout).generated_ids).toEqual(expected.generated.slice(0, 12));
    const said = generate(...tinyArgs, "--max-new-tokens", "4", "--cold");
    expect(said.stderr).toMatch(
      /^time to first token [\d.]+ ms, [\d.]+ ms per output token after it \(mean\); the process's first request \(--cold\)$/m,
    );
  });

  test("--cache off gives the same tokens", () => {
    const r = generate(...tinyArgs, "--max-new-tokens", "48", "--json", "--cache", "off");
    expect(JSON.parse(r.stdout).generated_ids).toEqual(expected.generated);
  });

  test("--dump-logits writes (len(prompt)+generated, vocab) float32 matching the fixture", () => {
    const dir = mkdtempSync(join(tmpdir(), "dump-"));
    const file = join(dir, "logits.f32");
    const r = generate(...tinyArgs, "--max-new-tokens", String(expected.generated.length), "--dump-logits", file);
    expect(r.code).toBe(0);
    const got = new Float32Array(readFileSync(file).buffer.slice(0));
    const want = new Float32Array(readFileSync(join(FIXTURE, "expected_logits.f32")).buffer.slice(0));
    expect(got.length).toBe(want.length);
    expect(maxRelativeError(got, want)).toBeLessThan(1e-4);
    rmSync(dir, { recursive: true });
  });
});

test("exits 0 after a run whose ops used the thread pool, 5 times out of 5 (the library's threads end before it is unmapped)", async () => {
  // a 40-token recompute runs every linear on the pool; with OpenMP's threads, closing the library at the end
  // crashed 19 runs in 20 with SIGSEGV after printing correct output (the pool's destructor joins its workers)
  const args = [
    process.execPath,
    join(ROOT, "src/cli/generate.ts"),
    "--backend",
    "cpu",
    "--model",
    FIXTURE,
    "--prompt-ids",
    Array.from({ length: 40 }, (_, i) => i + 1).join(","),
    "--max-new-tokens",
    "5",
    "--cache",
    "off",
    "--json",
  ];
  for (let run = 0; run < 5; run++) {
    const p = Bun.spawn(args, { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    const [code, stdout] = await Promise.all([p.exited, new Response(p.stdout).text()]);
    expect({ run, code, signal: p.signalCode }).toEqual({ run, code: 0, signal: null });
    expect(JSON.parse(stdout).generated_ids).toHaveLength(5);
  }
});

const brokenModelDirs: string[] = [];
afterAll(() => {
  for (const dir of brokenModelDirs) rmSync(dir, { recursive: true, force: true });
});

/** A copy of the fixture with its safetensors bytes or config rewritten by `corrupt`, removed after the file's tests. */
function brokenModel(corrupt: (dir: string) => void): string {
  const dir = mkdtempSync(join(tmpdir(), "broken-model-"));
  brokenModelDirs.push(dir);
  for (const f of ["config.json", "model.safetensors"]) copyFileSync(join(FIXTURE, f), join(dir, f));
  corrupt(dir);
  return dir;
}

function rewriteHeader(
  dir: string,
  edit: (header: Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>) => void,
) {
  const path = join(dir, "model.safetensors");
  const bytes = readFileSync(path);
  const n = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + n).toString());
  edit(header);
  let text = JSON.stringify(header);
  text = text.padEnd(Math.max(text.length, n), " ");
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(text.length));
  writeFileSync(path, Buffer.concat([prefix, Buffer.from(text), bytes.subarray(8 + n)]));
}

const badInputs: Array<[string, string[], RegExp]> = [
  ["context overflow", [...tinyArgs, "--max-new-tokens", "60"], /context overflow/],
  [
    "a token id outside the vocabulary",
    ["--model", FIXTURE, "--backend", "cpu", "--prompt-ids", "1,99999"],
    /out of range/,
  ],
  [
    "text prompt for a non-GPT-2 vocabulary",
    ["--model", FIXTURE, "--backend", "cpu", "--prompt", "hi"],
    /--prompt-ids/,
  ],
  ["an unknown flag", ["--bogus"], /bogus/],
  [
    "a seed for a checkpoint's own weights",
    ["--model", FIXTURE, "--seed", "3"],
    /model and seed are mutually exclusive/,
  ],
  [
    "more threads than the CPUs this process may run on",
    [...tinyArgs, "--threads", "1000"],
    /^error: --threads 1000: this process may run on \d+ CPUs?; give 1\.\.\d+$/,
  ],
  [
    "--threads for the emulator",
    ["--model", FIXTURE, "--backend", "emu", "--prompt-ids", "1,2", "--threads", "1"],
    /--backend emu has none to set/,
  ],
  ["an unknown mode", ["--mode", "warp"], /warp/],
  [
    "the persistent step on the CPU",
    [...tinyArgs, "--mode", "persistent"],
    /^error: launch mode persistent is not available on the cpu backend: it has no persistent step kernel \(a GPU's\) \(available: eager, eager-native\)$/,
  ],
  ["a missing model directory", ["--model", "/nonexistent/model"], /nonexistent/],
  ["a missing config", ["--model", brokenModel((d) => rmSync(join(d, "config.json")))], /config\.json/],
  [
    "a truncated file",
    [
      "--model",
      brokenModel((d) => {
        const p = join(d, "model.safetensors");
        writeFileSync(p, readFileSync(p).subarray(0, 100_000));
      }),
    ],
    /truncat|past the end|outside|shorter/i,
  ],
  [
    "a header length past the end",
    [
      "--model",
      brokenModel((d) => {
        const p = join(d, "model.safetensors");
        const b = readFileSync(p);
        b.writeBigUInt64LE(BigInt(b.length * 2), 0);
        writeFileSync(p, b);
      }),
    ],
    /header/i,
  ],
  [
    "offsets out of range",
    [
      "--model",
      brokenModel((d) =>
        rewriteHeader(d, (h) => {
          h["wpe.weight"]!.data_offsets = [h["wpe.weight"]!.data_offsets[0], 1e12];
        }),
      ),
    ],
    /wpe\.weight/,
  ],
  [
    "overlapping offsets",
    [
      "--model",
      brokenModel((d) =>
        rewriteHeader(d, (h) => {
          h["ln_f.bias"]!.data_offsets = [...h["ln_f.weight"]!.data_offsets];
        }),
      ),
    ],
    /overlap/i,
  ],
  [
    "an unknown dtype",
    [
      "--model",
      brokenModel((d) =>
        rewriteHeader(d, (h) => {
          h["ln_f.bias"]!.dtype = "Q7";
        }),
      ),
    ],
    /Q7/,
  ],
  [
    "a shape that disagrees with the config",
    [
      "--model",
      brokenModel((d) => {
        const p = join(d, "config.json");
        writeFileSync(p, JSON.stringify({ ...JSON.parse(readFileSync(p, "utf8")), n_embd: 256 }));
      }),
    ],
    /shape/i,
  ],
  [
    "a missing tensor",
    [
      "--model",
      brokenModel((d) =>
        rewriteHeader(d, (h) => {
          h["h.1.mlp.c_fc.b"] = h["h.1.mlp.c_fc.bias"]!; // its bytes kept by another name: a hole is another error
          delete h["h.1.mlp.c_fc.bias"];
        }),
      ),
    ],
    /h\.1\.mlp\.c_fc\.bias is missing/,
  ],
];

describe("generate --batch: several sequences in one step", () => {
  const tiny = ["--model", FIXTURE, "--backend", "cpu", "--max-new-tokens", "10", "--json"];
  const ids = (r: ReturnType<typeof generate>) => JSON.parse(r.stdout).generated_ids as number[][];

  test("B prompts give a list per sequence, each the tokens it gets alone", () => {
    const prompts = [expected.prompt.join(","), "5,9,2"];
    const r = generate(...tiny, ...prompts.flatMap((p) => ["--prompt-ids", p]));
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.batch).toBe(2);
    expect(out.prompt_ids).toEqual([expected.prompt, [5, 9, 2]]);
    expect(ids(r)).toEqual(prompts.map((p) => JSON.parse(generate(...tiny, "--prompt-ids", p).stdout).generated_ids));
  });

  test("one prompt with --batch 3 is repeated: three equal sequences", () => {
    const r = generate(...tiny, "--prompt-ids", "5,9,2", "--batch", "3");
    expect(ids(r)).toHaveLength(3);
    expect(new Set(ids(r).map((x) => x.join(","))).size).toBe(1);
  });

  test.each([
    [
      "a batch that disagrees with the prompts",
      ["--prompt-ids", "1,2", "--prompt-ids", "3", "--batch", "3"],
      /--batch 3 takes one prompt \(repeated\) or 3 prompts, not 2/,
    ],
    [
      "a batch above the most a step decodes",
      ["--prompt-ids", "1,2", "--batch", "9"],
      /--batch must be an integer in 1\.\.8/,
    ],
    [
      "--dump-logits with several sequences",
      ["--prompt-ids", "1,2", "--batch", "2", "--dump-logits", join(tmpdir(), "never.f32")],
      /--dump-logits writes one sequence's logits/,
    ],
    ["an unknown storage type", ["--prompt-ids", "1,2", "--dtype", "fp8"], /fp8/],
  ])("%s is one line", (_, args, message) => {
    const r = generate("--model", FIXTURE, "--backend", "cpu", ...args);
    expect(r.code).not.toBe(0);
    const lines = r.stderr.split("\n").filter((l) => l.startsWith("error:"));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(message);
    expect(r.stderr).not.toMatch(/^model: /m);
  });
});

describe("generate: bad input is one clear line and exit ≠ 0", () => {
  test.each(badInputs)("%s", (_, args, message) => {
    const r = generate(...args);
    expect(r.code).not.toBe(0);
    const errorLines = r.stderr.split("\n").filter((l) => l.startsWith("error:"));
    expect(errorLines).toHaveLength(1);
    expect(errorLines[0]).toMatch(message);
    expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
    expect(r.stderr).not.toMatch(/^model: /m); // the model's lines wait until its flags are known good
  });
});

describe("generate: the Llama family", () => {
  const LLAMA = join(import.meta.dir, "fixtures/llama-tiny");
  const llama = JSON.parse(readFileSync(join(LLAMA, "expected.json"), "utf8"));

  test("--model llama-tiny gives its reference tokens; --prompt goes through its tokenizer.json", () => {
    const ids = generate("--model", LLAMA, "--backend", "cpu", "--prompt-ids", llama.prompt.join(","), "--json");
    expect(ids.code).toBe(0);
    expect(JSON.parse(ids.stdout).generated_ids).toEqual(llama.generated.slice(0, 20));
    expect(JSON.parse(ids.stdout).plan).toBe("fused");
    const text = generate("--model", LLAMA, "--backend", "cpu", "--prompt", llama.tokenizer_check.text, "--json");
    expect(text.code).toBe(0);
    expect(JSON.parse(text.stdout).prompt_ids).toEqual(llama.tokenizer_check.ids);
    expect(text.stderr).toContain("tokenizer.json");
  });

  test("a preset that does not fit, and a text prompt without a tokenizer: one line each", () => {
    const one = (r: ReturnType<typeof generate>, pattern: RegExp) => {
      expect(r.code).not.toBe(0);
      expect(r.stderr.trim().split("\n")).toHaveLength(1);
      expect(r.stderr).toMatch(pattern);
    };
    one(
      generate("--model", join(import.meta.dir, "fixtures/qwen3-tiny"), "--backend", "cpu", "--prompt", "hi"),
      /^error: qwen3-tiny has no tokenizer\.json .* --prompt-ids/,
    );
    // a machine with more free memory holds it: the rule itself is checked in llama-config.test.ts
    if (freemem() < 32e9)
      one(
        generate("--preset", "llama-3.1-8b", "--backend", "cpu"),
        /^error: llama-3\.1-8b in f32 is 32\.1 GB of weights.*--dtype/,
      );
    else console.log("cli-generate: llama-3.1-8b's f32 weights fit this machine's free memory: refusal not run");
    // weights that fit, a cache that does not: 8 × 131,001 positions of f32 rows is 68.7 GB
    const long = ["--preset", "llama-3.2-1b", "--dtype", "bf16", "--kv-dtype", "f32", "--batch", "8"];
    if (freemem() < 70e9)
      one(
        generate(...long, "--backend", "cpu", "--prompt-ids", "1", "--max-new-tokens", "131000"),
        /^error: memory: 131001 positions × batch 8 need 71\.\d\d GB at once \(weights 2\.\d\d GB \+ K\/V cache 68\.68 GB \+ activations .*\) and the machine has .* free: at batch 8 at most \d+ positions fit \(prompt \+ --max-new-tokens\)$/m,
      );
    else console.log("cli-generate: 71.5 GB fits this machine's free memory: the cache refusal not run");
  });

  test("a malformed tokenizer.json: one line for a text prompt, a note beside --prompt-ids, which still work", () => {
    const dir = mkdtempSync(join(tmpdir(), "broken-tokenizer-"));
    try {
      cpSync(LLAMA, dir, { recursive: true });
      writeFileSync(join(dir, "tokenizer.json"), '{"model": ');
      const text = generate("--model", dir, "--backend", "cpu", "--prompt", "hi");
      expect(text.code).not.toBe(0);
      expect(text.stderr.trim().split("\n")).toEqual([
        expect.stringMatching(/^error: .*tokenizer\.json: not valid JSON/),
      ]);
      const ids = generate("--model", dir, "--backend", "cpu", "--prompt-ids", llama.prompt.join(","), "--json");
      expect(ids.code).toBe(0);
      expect(JSON.parse(ids.stdout).generated_ids).toEqual(llama.generated.slice(0, 20));
      expect(ids.stderr).toMatch(/^note: .*tokenizer\.json: not valid JSON.*the text is shown as ids$/m);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("generate --save-prefix / --prefix: prompt caching", () => {
  const LLAMA = join(import.meta.dir, "fixtures/llama-tiny");
  const dir = mkdtempSync(join(tmpdir(), "generate-prefix-"));
  const prefixIds = "1,2,3,4,5,6,7,8,9,10";
  const longer = `${prefixIds},11,12,13`;
  const file = join(dir, "p.prefix");
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const run = (...args: string[]) =>
    generate("--model", LLAMA, "--backend", "cpu", "--max-new-tokens", "8", "--json", ...args);
  const ids = (r: ReturnType<typeof run>) => JSON.parse(r.stdout).generated_ids as number[];

  test("a saved prefix gives the cold run's tokens, in every CPU mode, with only the suffix prefilled", () => {
    const saved = run("--prompt-ids", prefixIds, "--save-prefix", file);
    expect(saved.code).toBe(0);
    // llama-tiny: 2 layers × K and V × 10 rows × 2 K/V heads × 64 × 4 bytes
    expect(JSON.parse(saved.stdout).saved_prefix).toMatchObject({ tokens: 10, bytes: 2 * 2 * 10 * 128 * 4 });
    const cold = ids(run("--prompt-ids", longer));
    for (const mode of ["eager", "eager-native"]) {
      const warm = run("--prompt-ids", longer, "--prefix", file, "--mode", mode);
      expect(warm.code).toBe(0);
      expect(ids(warm)).toEqual(cold);
      expect(JSON.parse(warm.stdout).prefix).toMatchObject({ tokens: 10, reused_rows: 10, restored_bytes: 20480 });
    }
    // the prompt is the prefix: its last token is prefilled again, its row's bytes not restored
    const same = run("--prompt-ids", prefixIds, "--prefix", file);
    expect(ids(same)).toEqual(ids(saved));
    expect(JSON.parse(same.stdout).prefix).toMatchObject({ reused_rows: 9, bytes: 20480, restored_bytes: 18432 });
    const said = generate(
      "--model",
      LLAMA,
      "--backend",
      "cpu",
      "--max-new-tokens",
      "2",
      "--prompt-ids",
      prefixIds,
      "--prefix",
      file,
    );
    expect(said.stderr).toContain(
      "9 of the prompt's 10 tokens' keys and values restored (18432 of the 20480 bytes of rows the file keeps); read and checked once in",
    );
    // the time to first token with the file's read beside it, the figure profile's warm start from a file gives
    expect(said.stderr).toMatch(
      /outside the time to first token \([\d.]+ ms with it, as profile's warm start from a file counts the read\)$/m,
    );
  });

  test("two sequences: each one's restored rows said, and a prompt that does not begin with the prefix named", () => {
    const said = generate(
      ...["--model", LLAMA, "--backend", "cpu", "--max-new-tokens", "2", "--batch", "2"],
      ...["--prompt-ids", longer, "--prompt-ids", prefixIds, "--prefix", file],
    );
    expect(said.code).toBe(0);
    expect(said.stderr).toContain(
      "10 of sequence 1's 13 tokens' keys and values restored (20480 bytes); " +
        "9 of sequence 2's 10 tokens' keys and values restored (18432 of the 20480 bytes of rows the file keeps); read and checked once in",
    );
    const refused = generate(
      ...["--model", LLAMA, "--backend", "cpu", "--max-new-tokens", "2", "--batch", "2"],
      ...["--prompt-ids", longer, "--prompt-ids", "1,2,3", "--prefix", file],
    );
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(
      /^error: sequence 2's prompt \(3 tokens\) is shorter than the 10-token prefix of .*p\.prefix: it must begin with the prefix$/m,
    );
  });

  test.each([
    [
      "another storage type",
      ["--prompt-ids", longer, "--kv-dtype", "bf16"],
      /holds a f32 cache; this run's cache is bf16/,
      "saved",
    ],
    [
      "another model",
      ["--prompt-ids", longer],
      /was saved from another model: a llama model \(llama-tiny\), and this is a gpt2 model/,
      "gpt2",
    ],
    [
      "another model, given a prompt shorter than the prefix",
      ["--prompt-ids", "1,2"],
      /was saved from another model: a llama model \(llama-tiny\), and this is a gpt2 model/,
      "gpt2",
    ],
    [
      "a prompt that does not begin with it",
      ["--prompt-ids", "1,2,3,5,5,6,7,8,9,10,11"],
      /token 4 is 5, the prefix's is 4/,
      "saved",
    ],
    [
      "--cache off",
      ["--prompt-ids", longer, "--cache", "off"],
      /--prefix keeps the KV cache's rows: it needs --cache on/,
      "saved",
    ],
    ["a truncated file", ["--prompt-ids", longer], /is truncated: 3000 bytes of the/, "truncated"],
    ["a file that is not one", ["--prompt-ids", longer], /is not a prefix file/, "config"],
  ] as [string, string[], RegExp, string][])("%s is one line, and nothing is saved", (_, args, message, which) => {
    const source =
      which === "truncated" ? join(dir, "cut.prefix") : which === "config" ? join(LLAMA, "config.json") : file;
    if (which === "truncated") writeFileSync(source, readFileSync(file).subarray(0, 3000));
    const model = which === "gpt2" ? ["--model", FIXTURE] : ["--model", LLAMA];
    const target = join(dir, "never.prefix");
    const r = generate(...model, "--backend", "cpu", ...args, "--prefix", source, "--save-prefix", target);
    expect(r.code).not.toBe(0);
    const lines = r.stderr.split("\n").filter((l) => l.startsWith("error:"));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(message);
    expect(r.stderr).not.toMatch(/^model: /m);
    expect(() => readFileSync(target)).toThrow();
  });

  test("--save-prefix over a file that exists: refused and the file kept, replaced with --force", () => {
    const existing = join(dir, "existing.prefix");
    writeFileSync(existing, "mine");
    const refused = run("--prompt-ids", prefixIds, "--save-prefix", existing);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/^error: --save-prefix .*existing\.prefix exists: give --force to replace it/m);
    expect(readFileSync(existing, "utf8")).toBe("mine");
    const replaced = run("--prompt-ids", prefixIds, "--save-prefix", existing, "--force");
    expect(replaced.code).toBe(0);
    const restored = run("--prompt-ids", prefixIds, "--prefix", existing);
    expect(restored.code).toBe(0);
    expect(JSON.parse(restored.stdout).prefix).toMatchObject({ tokens: 10, reused_rows: 9 });
  });

  test("--save-prefix with several sequences is one line", () => {
    const r = run("--prompt-ids", prefixIds, "--batch", "2", "--save-prefix", join(dir, "never2.prefix"));
    expect(r.stderr).toMatch(/^error: --save-prefix keeps one prompt's keys and values/m);
  });
});
