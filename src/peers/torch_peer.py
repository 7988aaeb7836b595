#!/usr/bin/env python3
"""The PyTorch peer of the decode-floor study: the cached decode step the ways PyTorch users run it, for GPT-2
(torch_gpt2.py) and the Llama family (torch_llama.py).

Variants (each on the same Hugging Face weights: DIR/config.json + DIR/model.safetensors, read without the
`safetensors` package):
  seed     eager PyTorch, the KV cache grown by torch.cat every step (the seed experiment's way)
  static   eager, a preallocated cache written in place; attention over the filled rows only
  graph    CUDA only: the fixed-shape static step (attention over every cache row, masked) captured once
           with torch.cuda.CUDAGraph and replayed
  compile  CUDA only: the same fixed-shape step under torch.compile(mode="reduce-overhead")
  hf       transformers' GPT2LMHeadModel with its own cache, when transformers imports

Per context c the caches really hold c tokens (a prefill of c prompt tokens), then single-token decode steps
at position c are timed (CUDA events on the GPU, perf_counter on the CPU), the cache reset to c before each.
One seed-style step per context is traced with torch.profiler: ATen ops (CPU) or kernels (GPU) per token,
host time issuing the step, device busy and idle — the split the project reports for itself.

  python3 torch_peer.py --model DIR [--device cpu|cuda] [--threads N] [--variants seed,static,...|all]
                        [--contexts 8,128] [--repeats N] [--warmup N] [--prompt-ids 1,2,3] [--new-tokens 20]
                        [--logits-dir DIR] [--no-trace]      → one JSON object on stdout
  python3 torch_peer.py --model DIR ... --serve               → JSON lines: one command in, one reply out

Errors: one line `error: ...` on stderr, exit 1.
"""
import argparse
import json
import math
import mmap
import os
import re
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2 import GPT2, GPT2Weights, gpt2_config, gpt2_fixed_step_module, load_hf_gpt2  # noqa: E402
from torch_llama import Llama, LlamaWeights, is_llama, llama_config, llama_fixed_step_module, load_hf_llama  # noqa: E402

VARIANTS = ["seed", "static", "graph", "compile", "hf"]
LABELS = {  # variant: (short name for tables and plots, what it is)
    "seed": ("PyTorch seed-style", "PyTorch eager, cache grown by torch.cat (seed-style)"),
    "static": ("PyTorch static", "PyTorch eager, static cache written in place"),
    "graph": ("PyTorch CUDA graph", "PyTorch static cache, CUDA graph replay"),
    "compile": ("PyTorch compile", 'PyTorch torch.compile(mode="reduce-overhead")'),
    "hf": ("HF transformers", "Hugging Face transformers' model of the architecture, its own cache"),
}
WEIGHT_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


class PeerError(Exception):
    """A problem with the input or the environment: one line on stderr."""


def fill_prompt(n, vocab, seed):
    """The project's deterministic prompt (src/profile/study.ts promptOf): (imul(i + 1 + seed, 2654435761) >>> 0) % vocab."""
    return [(((i + 1 + seed) * 2654435761) & 0xFFFFFFFF) % vocab for i in range(n)]


def percentile(sorted_values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def describe(samples):
    s = sorted(samples)
    return {"n": len(s), "median": percentile(s, 0.5), "p10": percentile(s, 0.1), "p90": percentile(s, 0.9), "min": s[0], "max": s[-1]}


# ---- weights --------------------------------------------------------------------------------------

def read_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        raise PeerError(f"{path}: cannot read ({e})")
    if is_llama(raw):
        return llama_config(raw, PeerError)
    return gpt2_config(raw, PeerError, path)


def read_safetensors(torch, path, skipped=lambda name: False):
    """{name without "transformer.": float32 tensor}: u64 header length, JSON header, raw little-endian data
    (the tensors an architecture does not load, `skipped`, left out)."""
    try:
        with open(path, "rb") as f:  # mapped copy-on-write: the file is never held twice in memory
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    except (OSError, ValueError) as e:
        raise PeerError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e})")
    if len(data) < 8:
        raise PeerError(f"{path}: not a safetensors file")
    (header_len,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8:8 + header_len])
    except ValueError as e:
        raise PeerError(f"{path}: bad header ({e})")
    base = 8 + header_len
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        short = name[len("transformer."):] if name.startswith("transformer.") else name
        if skipped(short):
            continue
        dtype = WEIGHT_DTYPES.get(entry["dtype"])
        if dtype is None:
            raise PeerError(f"{path}: tensor {name} has dtype {entry['dtype']}; weights must be F32, F16 or BF16")
        begin, end = entry["data_offsets"]
        count = math.prod(entry["shape"])
        if base + end > len(data) or end - begin != count * torch.finfo(getattr(torch, dtype)).bits // 8:
            raise PeerError(f"{path}: tensor {name} does not fit its data_offsets (truncated file?)")
        t = torch.frombuffer(data, dtype=getattr(torch, dtype), count=count, offset=base + begin)
        tensors[short] = t.reshape(entry["shape"]).float().clone()
    return tensors


# ---- the model, three ways ------------------------------------------------------------------------

# ---- the peer -------------------------------------------------------------------------------------

class TorchPeer:
    def __init__(self, torch, args):
        self.torch = torch
        self.device = torch.device(args.device)
        self.cuda = args.device == "cuda"
        cfg = read_config(args.model)
        self.llama = "arch" in cfg
        if self.llama:
            self.w = LlamaWeights(torch, args.model, self.device, cfg, read_safetensors, PeerError)
            self.m = Llama(torch, self.w)
        else:
            self.w = GPT2Weights(torch, args.model, self.device, cfg, read_safetensors, PeerError)
            self.m = GPT2(torch, self.w)
        self.cfg = self.w.cfg
        self.max_rows = min(self.cfg["n_positions"], args.cache_rows)
        L, nh, hs = self.cfg["n_layer"], getattr(self.m, "kv_heads", self.m.nh), self.m.hs
        self.kc = torch.zeros(L, nh, self.max_rows, hs, device=self.device)
        self.vc = torch.zeros_like(self.kc)
        self.fill_seed = args.fill_seed
        self.requested = args.variants
        self.unavailable = {}
        self.hf = None
        self.fixed = None
        self.graph = None
        self.compiled = None
        self.context = None
        self.state = {}
        with torch.inference_mode():
            self.setup_variants()

    # -- set-up --

    def setup_variants(self):
        torch = self.torch
        for name in self.requested:
            if name in ("graph", "compile") and not self.cuda:
                self.unavailable[name] = "needs CUDA (this run is on the CPU)"
        if "compile" in self.requested and "compile" not in self.unavailable and not hasattr(torch, "compile"):
            self.unavailable["compile"] = f"torch {torch.__version__} has no torch.compile"
        if any(v in self.requested and v not in self.unavailable for v in ("graph", "compile")):
            fixed = llama_fixed_step_module if self.llama else gpt2_fixed_step_module
            self.fixed = fixed(torch, self.m, self.kc, self.vc)
            self.tok_in = torch.zeros(1, dtype=torch.long, device=self.device)
            self.pos_in = torch.zeros(1, dtype=torch.long, device=self.device)
        if "graph" in self.requested and "graph" not in self.unavailable:
            try:
                self.capture_graph()
            except Exception as e:  # a capture failure names the variant, the rest still runs
                self.unavailable["graph"] = f"CUDA graph capture failed: {one_line(e)}"
        if "compile" in self.requested and "compile" not in self.unavailable:
            try:
                self.compiled = torch.compile(self.fixed, mode="reduce-overhead", fullgraph=True)
                for _ in range(3):  # compiles, records the CUDA graph, replays
                    self.pos_in.fill_(0)
                    self.compiled(self.tok_in, self.pos_in)
                torch.cuda.synchronize()
            except Exception as e:
                self.unavailable["compile"] = f"torch.compile failed: {one_line(e)}"
        if "hf" in self.requested:
            try:
                self.hf = self.load_hf()
            except ImportError as e:
                self.unavailable["hf"] = f"transformers is not importable ({one_line(e)})"

    def capture_graph(self):
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.pos_in.fill_(0)
                self.fixed(self.tok_in, self.pos_in)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            nxt = self.fixed(self.tok_in, self.pos_in)
            # back-to-back replays generate: the next token and position are the graph's own inputs
            self.tok_in.copy_(nxt)
            self.pos_in.add_(1)
        torch.cuda.synchronize()

    def load_hf(self):
        load = load_hf_llama if self.llama else load_hf_gpt2
        model, self.hf_version = load(self.torch, self.w, self.device, PeerError)
        return model

    def available(self):
        return [v for v in self.requested if v not in self.unavailable]

    def info(self):
        torch = self.torch
        threads = torch.get_num_threads()
        variants = []
        for name in self.requested:
            entry = {"name": name, "short": LABELS[name][0], "label": LABELS[name][1], "available": name not in self.unavailable}
            if name in self.unavailable:
                entry["reason"] = self.unavailable[name]
            else:
                entry["settings"] = self.settings_of(name)
            variants.append(entry)
        return {
            "peer": "torch",
            "python": {"executable": sys.executable, "version": sys.version.split()[0]},
            "torch": torch.__version__,
            "transformers": getattr(self, "hf_version", None),
            "device": "cuda" if self.cuda else "cpu",
            "device_name": torch.cuda.get_device_name(0) if self.cuda else cpu_name(),
            "threads": threads,
            "blas": blas_in_use(torch, self.cuda),
            "cache_rows": self.max_rows,
            "timing": "CUDA events around each step" if self.cuda else "perf_counter wall time around each step",
            "variants": variants,
        }

    def settings_of(self, name):
        common = {"dtype": "float32", "threads": self.torch.get_num_threads(), "cache": "fp32 K and V"}
        if name == "seed":
            return {**common, "step": "eager; K, V grown by torch.cat; manual attention; addmm linears; next token by argmax"}
        if name == "static":
            return {**common, "step": f"eager; K, V written in place into a ({self.max_rows}-row) cache; attention over the filled rows"}
        if name == "graph":
            return {**common, "step": f"fixed shapes: attention over all {self.max_rows} rows, masked past the position; one CUDA graph replay per token"}
        if name == "compile":
            return {**common, "step": 'the graph variant\'s fixed-shape step under torch.compile(mode="reduce-overhead", fullgraph=True)'}
        return {**common, "step": f"transformers {getattr(self, 'hf_version', '?')} {type(self.hf).__name__}, attention {getattr(self.hf.config, '_attn_implementation', '?')}, its own cache (cropped back after each step)"}

    # -- filling the caches to a context --

    def fill(self, context):
        """Every available variant's cache holds `context` prompt tokens; returns the token each decodes next."""
        torch = self.torch
        if not 1 <= context < self.max_rows:
            raise PeerError(f"context {context} does not fit: a step at context c writes row c, and the cache has {self.max_rows} rows")
        ids = torch.tensor(fill_prompt(context, self.cfg["vocab_size"], self.fill_seed), device=self.device)
        self.context = context
        self.state = {}
        with torch.inference_mode():
            avail = self.available()
            if "seed" in avail:
                logits, past = self.m.forward_cat(ids, None)
                self.state["seed"] = (logits.argmax().view(1), past)
            if any(v in avail for v in ("static", "graph", "compile")):
                logits = self.m.forward_static(ids, 0, self.kc, self.vc)
                self.state["static"] = logits.argmax().view(1)
            if "hf" in avail:
                out = self.hf(input_ids=ids.view(1, -1), use_cache=True)
                self.state["hf"] = (out.logits[0, -1].argmax().view(1, 1), out.past_key_values)
        self.sync()
        return {v: self.next_token_of(v) for v in avail}

    def next_token_of(self, variant):
        s = self.state["seed"][0] if variant == "seed" else self.state["hf"][0] if variant == "hf" else self.state["static"]
        return int(s.reshape(-1)[0])

    # -- one decode step at the filled context, per variant: (before, run) --

    def step_of(self, variant):
        torch, c = self.torch, self.context
        if variant == "seed":
            tok, past = self.state["seed"]
            return (lambda: None), (lambda: self.m.forward_cat(tok, past)[0].argmax())
        if variant == "static":
            tok = self.state["static"]
            return (lambda: None), (lambda: self.m.forward_static(tok, c, self.kc, self.vc).argmax())
        if variant in ("graph", "compile"):
            first = self.state["static"]

            def before():
                self.tok_in.copy_(first)
                self.pos_in.fill_(c)

            run = self.graph.replay if variant == "graph" else (lambda: self.compiled(self.tok_in, self.pos_in))
            return before, run
        tok, cache = self.state["hf"]

        def before_hf():
            if hasattr(cache, "crop"):
                cache.crop(c)  # a Cache object grows in place; a legacy tuple is left as it was

        return before_hf, (lambda: self.hf(input_ids=tok, past_key_values=cache, use_cache=True).logits[0, -1].argmax())

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def time(self, variant, steps, warmup=0):
        """Milliseconds of `steps` decode steps at the filled context, after `warmup` untimed ones."""
        torch = self.torch
        if variant not in self.available():
            raise PeerError(f"variant {variant} is not available: {self.unavailable.get(variant, 'not requested')}")
        if self.context is None:
            raise PeerError("fill a context before timing")
        before, run = self.step_of(variant)
        samples = []
        with torch.inference_mode():
            for i in range(warmup + steps):
                before()
                self.sync()
                if self.cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    run()
                    end.record()
                    end.synchronize()
                    ms = start.elapsed_time(end)
                else:
                    t0 = time.perf_counter()
                    run()
                    ms = (time.perf_counter() - t0) * 1e3
                if i >= warmup:
                    samples.append(ms)
        return samples

    def trace(self):
        """One seed-style step at the filled context under torch.profiler: where its time goes."""
        torch = self.torch
        if "seed" not in self.available():
            raise PeerError("the traced step is the seed-style one; ask for the seed variant")
        _, run = self.step_of("seed")
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if self.cuda else [])
        with torch.inference_mode():
            calls = count_torch_calls(torch, run)  # also warms: first calls allocate
            run()
            self.sync()
            with torch.profiler.profile(activities=acts) as prof:
                with torch.profiler.record_function("decode_step"):
                    run()
                self.sync()
        if self.cuda:
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "trace.json")
                prof.export_chrome_trace(path)
                with open(path, encoding="utf-8") as f:
                    split = cuda_split(json.load(f)["traceEvents"])
        else:
            split = cpu_split(prof.events(), calls)
        return {"context": self.context, "torch_calls": calls, **split}

    def generate(self, variant, prompt, n, logits_path=None):
        """Greedy tokens: the prompt's prefill picks the first, then n - 1 decode steps (the variant's step)."""
        torch = self.torch
        if variant not in self.available():
            raise PeerError(f"variant {variant} is not available: {self.unavailable.get(variant, 'not requested')}")
        if len(prompt) + n > self.max_rows:
            raise PeerError(f"prompt ({len(prompt)}) + {n} tokens exceed the cache's {self.max_rows} rows")
        ids = torch.tensor(prompt, device=self.device)
        rows, out = [], []
        with torch.inference_mode():
            if variant == "seed":
                logits, past = self.m.forward_cat(ids, None)
                for i in range(n):
                    rows.append(logits)
                    out.append(int(logits.argmax()))
                    if i + 1 < n:
                        logits, past = self.m.forward_cat(logits.argmax().view(1), past)
            elif variant == "static":
                logits = self.m.forward_static(ids, 0, self.kc, self.vc)
                for i in range(n):
                    rows.append(logits)
                    out.append(int(logits.argmax()))
                    if i + 1 < n:
                        logits = self.m.forward_static(logits.argmax().view(1), len(prompt) + i, self.kc, self.vc)
            elif variant in ("graph", "compile"):
                logits = self.m.forward_static(ids, 0, self.kc, self.vc)
                rows.append(logits)
                self.tok_in.copy_(logits.argmax().view(1))
                self.pos_in.fill_(len(prompt))
                out.append(int(self.tok_in[0]))
                for _ in range(n - 1):
                    if variant == "graph":
                        self.graph.replay()  # advances tok_in and pos_in itself
                    else:
                        nxt = self.compiled(self.tok_in, self.pos_in)
                        self.tok_in.copy_(nxt.view(1))
                        self.pos_in.add_(1)
                    rows.append(self.fixed.logits.clone())
                    out.append(int(self.tok_in[0]))
            else:
                res = self.hf(input_ids=ids.view(1, -1), use_cache=True)
                cache = res.past_key_values
                for i in range(n):
                    logits = res.logits[0, -1]
                    rows.append(logits)
                    out.append(int(logits.argmax()))
                    if i + 1 < n:
                        res = self.hf(input_ids=logits.argmax().view(1, 1), past_key_values=cache, use_cache=True)
                        cache = res.past_key_values
        self.context = None  # the caches now hold the prompt, not a filled context
        if logits_path:
            with open(logits_path, "wb") as f:
                f.write(torch.stack(rows).float().cpu().numpy().astype("<f4").tobytes())
        return out


def one_line(e):
    return " ".join(str(e).split())[:300] or type(e).__name__


def cpu_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU"


def blas_in_use(torch, cuda):
    """Which BLAS the matmuls run on: MKL when torch links it, else the library the dynamic linker loaded."""
    config = torch.__config__.show()
    m = re.search(r"BLAS_INFO=(\w+)", config)
    info = m.group(1) if m else "unknown"
    gpu = "cuBLAS on the GPU; host: " if cuda else ""
    if info == "mkl" or torch.backends.mkl.is_available():
        return gpu + "MKL (linked into torch)"
    a = torch.ones(64, 64)
    a @ a  # makes sure the BLAS library is loaded
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            libs = sorted({line.split()[-1] for line in f if re.search(r"/[^/]*(blas|mkl)[^/]*\.so", line)})
    except OSError:
        libs = []
    openblas = [p for p in libs if "openblas" in p]
    if openblas:
        return gpu + f"OpenBLAS ({openblas[-1]})"
    if any("/blas/" in p or p.endswith("libblas.so.3") for p in libs):
        return gpu + f"reference BLAS ({libs[0]}): slow; on Debian `apt-get install libopenblas0` switches it"
    return gpu + f"{info} (no BLAS library found among the loaded ones)"


def count_torch_calls(torch, run):
    """Calls into torch that Python makes in one step (functions and tensor methods; property reads left
    out): each one crosses from the interpreter into the dispatcher. Counted in an untimed step."""
    from torch.overrides import TorchFunctionMode

    class Count(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") != "__get__":
                Count.calls += 1
            return func(*args, **(kwargs or {}))

    with Count():
        run()
    return Count.calls


def cpu_split(events, calls):
    """On the CPU the host runs the ops: busy = the union of the ops Python dispatched (children of the
    annotation; the legacy profiler nests by whole microseconds, so their count comes from `calls`),
    host issue = the rest of the step (interpreter and bindings between ops)."""
    step = next((e for e in events if e.name == "decode_step"), None)
    if step is None:
        raise PeerError("torch.profiler recorded no decode_step annotation")
    ops = [e for e in events if e.cpu_parent is not None and e.cpu_parent.id == step.id]
    step_us = step.time_range.end - step.time_range.start
    busy = union_us([{"ts": e.time_range.start, "dur": e.time_range.end - e.time_range.start} for e in ops])
    return {
        "unit": "torch calls", "ops_per_step": calls, "step_ms": step_us / 1e3, "host_issue_ms": (step_us - busy) / 1e3,
        "launch_api_ms": 0.0, "busy_ms": busy / 1e3, "idle_ms": (step_us - busy) / 1e3,
    }


def cuda_split(events):
    """On the GPU, from the Chrome trace (Kineto): kernels are the device's work, the annotation the host's issue."""
    step = next((e for e in events if e.get("name") == "decode_step" and e.get("ph") == "X" and e.get("cat") == "user_annotation"), None)
    if step is None:
        raise PeerError("torch.profiler recorded no decode_step annotation")
    t0, t1 = step["ts"], step["ts"] + step["dur"]
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["ts"] >= t0]
    launches = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cuda_runtime" and "Launch" in e.get("name", "") and t0 <= e["ts"] <= t1]
    end = max([t1] + [e["ts"] + e["dur"] for e in device])
    busy = union_us(device)
    return {
        "unit": "kernel launches", "ops_per_step": len(device), "step_ms": (end - t0) / 1e3, "host_issue_ms": step["dur"] / 1e3,
        "launch_api_ms": union_us(launches) / 1e3, "busy_ms": busy / 1e3, "idle_ms": (end - t0 - busy) / 1e3,
    }


def union_us(intervals):
    total, run_start, run_end = 0.0, None, None
    for e in sorted(intervals, key=lambda e: e["ts"]):
        s, t = e["ts"], e["ts"] + e["dur"]
        if run_end is not None and s <= run_end:
            run_end = max(run_end, t)
            continue
        if run_end is not None:
            total += run_end - run_start
        run_start, run_end = s, t
    if run_end is not None:
        total += run_end - run_start
    return total


# ---- command line ---------------------------------------------------------------------------------

def int_list(text):
    try:
        values = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers")
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give non-negative integers")
    return values


def variant_list(text):
    names = VARIANTS if text == "all" else [s.strip() for s in text.split(",") if s.strip()]
    bad = [n for n in names if n not in VARIANTS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown variant {bad[0] if bad else text!r} (variants: {', '.join(VARIANTS)}, all)")
    return list(dict.fromkeys(names))


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        raise PeerError(message)


def parse_args(argv):
    p = OneLineParser(prog="torch_peer.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="Hugging Face GPT-2 directory (config.json + model.safetensors)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--variants", type=variant_list, default=["seed", "static", "graph", "compile", "hf"])
    p.add_argument("--contexts", type=int_list, default=[8])
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--prompt-ids", type=int_list, default=None, help="prompt of the agreement check (default: the fill prompt of 8 tokens)")
    p.add_argument("--new-tokens", type=int, default=20)
    p.add_argument("--fill-seed", type=int, default=0, help="seed of the deterministic prompts that fill the cache")
    p.add_argument("--cache-rows", type=int, default=1 << 30, help="rows of the static cache (default: n_positions)")
    p.add_argument("--logits-dir", default=None, help="write each variant's logits of the generated tokens as <variant>.f32")
    p.add_argument("--no-trace", action="store_true", help="skip the torch.profiler step")
    p.add_argument("--serve", action="store_true", help="answer JSON-line commands on stdin")
    a = p.parse_args(argv)
    if a.threads < 1 or a.repeats < 1 or a.warmup < 0 or a.new_tokens < 1:
        raise PeerError("--threads, --repeats and --new-tokens must be ≥ 1, --warmup ≥ 0")
    return a


def import_torch(threads):
    # thread pools (OpenMP, OpenBLAS) size themselves when torch loads: set them first
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    try:
        import torch
    except ImportError as e:
        raise PeerError(f"{sys.executable} cannot import torch ({one_line(e)}): on Debian `apt-get install python3-torch libopenblas0`, elsewhere `pip install torch`")
    torch.set_num_threads(threads)
    return torch


def run_once(peer, args):
    """Every context: fill, time each variant (interleaved step by step), trace; then the agreement tokens."""
    cfg = peer.cfg
    prompt = args.prompt_ids or fill_prompt(8, cfg["vocab_size"], args.fill_seed)
    points, traces = [], []
    for c in args.contexts:
        peer.fill(c)
        for v in peer.available():
            peer.time(v, 0, args.warmup)
        samples = {v: [] for v in peer.available()}
        for _ in range(args.repeats):  # A B C A B C: drift hits every variant alike
            for v in samples:
                samples[v] += peer.time(v, 1)
        points += [{"variant": v, "context": c, "samples_ms": s, "ms": describe(s)} for v, s in samples.items()]
        if not args.no_trace and "seed" in peer.available():
            traces.append(peer.trace())
    generated = {}
    for v in peer.available():
        path = os.path.join(args.logits_dir, f"{v}.f32") if args.logits_dir else None
        generated[v] = peer.generate(v, prompt, args.new_tokens, path)
    return {**peer.info(), "prompt_ids": prompt, "generated": generated, "points": points, "traces": traces}


def serve(peer):
    """JSON lines: {"cmd": "info"|"fill"|"time"|"trace"|"generate"|"quit", ...} → {"ok": true, ...} or {"ok": false, "error": "..."}."""
    commands = {
        "info": lambda q: peer.info(),
        "fill": lambda q: {"next_tokens": peer.fill(int(q["context"]))},
        "time": lambda q: {"samples_ms": peer.time(q["variant"], int(q.get("steps", 1)), int(q.get("warmup", 0)))},
        "trace": lambda q: peer.trace(),
        "generate": lambda q: {"tokens": peer.generate(q["variant"], [int(t) for t in q["prompt"]], int(q["n"]))},
    }
    reply(peer.info())
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            q = json.loads(line)
            if q.get("cmd") == "quit":
                break
            handler = commands.get(q.get("cmd"))
            if handler is None:
                raise PeerError(f"unknown command {q.get('cmd')!r}")
            reply(handler(q))
        except (PeerError, KeyError, ValueError, TypeError) as e:
            reply({"ok": False, "error": one_line(e)})


PROTOCOL = None  # serve mode: the JSON-line channel (the original stdout); anything else printed goes to stderr


def reply(obj):
    PROTOCOL.write(json.dumps({"ok": True, **obj} if "ok" not in obj else obj) + "\n")
    PROTOCOL.flush()


def keep_stdout_for_replies():
    """Libraries that print (Python or C++) must not break the protocol: fd 1 becomes stderr, replies keep the original."""
    global PROTOCOL
    PROTOCOL = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)


def main(argv):
    try:
        args = parse_args(argv)
        if args.serve:
            keep_stdout_for_replies()
        torch = import_torch(args.threads)
        if args.device == "cuda" and not torch.cuda.is_available():
            raise PeerError(f"torch {torch.__version__} sees no CUDA device")
        rows = args.cache_rows
        if not args.serve:
            prompt_len = len(args.prompt_ids) if args.prompt_ids else 8
            rows = min(rows, max(max(args.contexts) + 1, prompt_len + args.new_tokens))
        args.cache_rows = rows
        peer = TorchPeer(torch, args)
        if args.serve:
            serve(peer)
        else:
            print(json.dumps(run_once(peer, args)))
        return 0
    except PeerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
