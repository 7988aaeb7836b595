"""The PyTorch peer's GPT-2, the way PyTorch users write it: the same interface as torch_llama.py's models —
forward_cat (the seed's torch.cat cache), forward_static (a cache written in place), gpt2_fixed_step_module (fixed
shapes, for a CUDA graph or torch.compile) and Hugging Face's GPT2LMHeadModel.
"""
import math
import os
import re

MASK_BUFFER = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")


def gpt2_skipped(name):
    """A checkpoint's causal-mask buffers, and the output head GPT-2 ties to wte: not loaded."""
    return bool(MASK_BUFFER.match(name)) or name == "lm_head.weight"


def gpt2_config(raw, error, path):
    if raw.get("model_type", "gpt2") != "gpt2":
        raise error(f"{path}: model_type is {raw.get('model_type')!r}, only gpt2 and the Llama family are supported")
    try:
        cfg = {
            "n_layer": int(raw["n_layer"]), "n_head": int(raw["n_head"]), "n_embd": int(raw["n_embd"]),
            "n_positions": int(raw.get("n_positions", raw.get("n_ctx"))), "vocab_size": int(raw["vocab_size"]),
            "layer_norm_epsilon": float(raw.get("layer_norm_epsilon", 1e-5)),
        }
    except (KeyError, TypeError, ValueError) as e:
        raise error(f"{path}: missing or bad field ({e})")
    if cfg["n_embd"] % cfg["n_head"]:
        raise error(f"{path}: n_embd {cfg['n_embd']} is not divisible by n_head {cfg['n_head']}")
    return cfg


class GPT2Weights:
    """GPT-2's parameters on a device; Conv1D weights stay (in, out) as Hugging Face stores them."""

    def __init__(self, torch, model_dir, device, cfg, read_safetensors, error):
        self.cfg = cfg
        raw = read_safetensors(torch, os.path.join(model_dir, "model.safetensors"), gpt2_skipped)
        self.raw = raw
        C = self.cfg["n_embd"]

        def get(name, shape):
            t = raw.get(name)
            if t is None:
                raise error(f"{model_dir}: tensor {name} is missing")
            if list(t.shape) != shape:
                raise error(f"{model_dir}: tensor {name} has shape {list(t.shape)}, expected {shape}")
            return t.to(device)

        self.wte = get("wte.weight", [self.cfg["vocab_size"], C])  # (V, C), also the tied output head
        self.wpe = get("wpe.weight", [self.cfg["n_positions"], C])  # (T, C)
        self.layers = []
        for i in range(self.cfg["n_layer"]):
            p = f"h.{i}."
            self.layers.append({
                "ln_1": (get(p + "ln_1.weight", [C]), get(p + "ln_1.bias", [C])),
                "c_attn": (get(p + "attn.c_attn.weight", [C, 3 * C]), get(p + "attn.c_attn.bias", [3 * C])),
                "attn_proj": (get(p + "attn.c_proj.weight", [C, C]), get(p + "attn.c_proj.bias", [C])),
                "ln_2": (get(p + "ln_2.weight", [C]), get(p + "ln_2.bias", [C])),
                "c_fc": (get(p + "mlp.c_fc.weight", [C, 4 * C]), get(p + "mlp.c_fc.bias", [4 * C])),
                "mlp_proj": (get(p + "mlp.c_proj.weight", [4 * C, C]), get(p + "mlp.c_proj.bias", [C])),
            })
        self.ln_f = (get("ln_f.weight", [C]), get("ln_f.bias", [C]))


class GPT2:
    """GPT-2's forward pass in plain eager PyTorch (addmm = Hugging Face's Conv1D)."""

    def __init__(self, torch, w):
        self.torch = torch
        self.F = torch.nn.functional
        self.w = w
        cfg = w.cfg
        self.C, self.nh = cfg["n_embd"], cfg["n_head"]
        self.hs = self.C // self.nh
        self.eps = cfg["layer_norm_epsilon"]
        self.scale = 1.0 / math.sqrt(self.hs)

    def norm(self, x, p):
        return self.F.layer_norm(x, (self.C,), p[0], p[1], self.eps)

    def heads(self, t):
        # (T, C) → (nh, T, hs)
        return t.view(t.shape[0], self.nh, self.hs).transpose(0, 1)

    def attend(self, q, k, v):
        # q: (nh, T, hs) at the last T of k's S positions; k, v: (nh, S, hs) → (T, C)
        T, S = q.shape[1], k.shape[1]
        att = (q @ k.transpose(-2, -1)) * self.scale  # (nh, T, S)
        if T > 1:
            causal = self.torch.ones(T, S, dtype=self.torch.bool, device=q.device).tril(S - T)
            att = att.masked_fill(~causal, float("-inf"))
        y = self.F.softmax(att, dim=-1) @ v  # (nh, T, hs)
        return y.transpose(0, 1).reshape(T, self.C)

    def block_tail(self, x, y, p):
        """Everything after attention: output projection, residual, MLP, residual."""
        x = x + self.torch.addmm(p["attn_proj"][1], y, p["attn_proj"][0])
        h = self.norm(x, p["ln_2"])
        h = self.F.gelu(self.torch.addmm(p["c_fc"][1], h, p["c_fc"][0]), approximate="tanh")
        return x + self.torch.addmm(p["mlp_proj"][1], h, p["mlp_proj"][0])

    def head(self, x, ln_f, wte):
        # logits of the last row: (V)
        return self.norm(x[-1:], ln_f)[0] @ wte.t()

    def qkv(self, x, p):
        qkv = self.torch.addmm(p["c_attn"][1], self.norm(x, p["ln_1"]), p["c_attn"][0])  # (T, 3C)
        return [self.heads(t) for t in qkv.split(self.C, dim=1)]

    def forward_cat(self, ids, past):
        """Seed-style: ids (T) after the past's S tokens; past = [(k, v) (nh, S, hs)] or None → (logits, new past)."""
        S = 0 if past is None else past[0][0].shape[1]
        x = self.w.wte[ids] + self.w.wpe[S:S + ids.shape[0]]
        new_past = []
        for layer, p in enumerate(self.w.layers):
            q, k, v = self.qkv(x, p)
            if past is not None:
                k = self.torch.cat([past[layer][0], k], dim=1)
                v = self.torch.cat([past[layer][1], v], dim=1)
            new_past.append((k, v))
            x = self.block_tail(x, self.attend(q, k, v), p)
        return self.head(x, self.w.ln_f, self.w.wte), new_past

    def forward_static(self, ids, pos, kc, vc):
        """Static cache kc, vc: (L, nh, N, hs); writes rows [pos, pos + T) in place, attends over [0, pos + T)."""
        T = ids.shape[0]
        x = self.w.wte[ids] + self.w.wpe[pos:pos + T]
        for layer, p in enumerate(self.w.layers):
            q, k, v = self.qkv(x, p)
            kc[layer, :, pos:pos + T] = k
            vc[layer, :, pos:pos + T] = v
            x = self.block_tail(x, self.attend(q, kc[layer, :, :pos + T], vc[layer, :, :pos + T]), p)
        return self.head(x, self.w.ln_f, self.w.wte)


def gpt2_fixed_step_module(torch, model, kc, vc):
    """The static step with fixed shapes (what a graph can capture): token and position live on the device,
    attention runs over all N cache rows with the rows past the position masked. forward() → next token (1).
    Weights and cache are the module's buffers, so torch.compile's CUDA graphs treat them as static inputs."""
    F = torch.nn.functional
    w = model.w
    keys = list(w.layers[0])  # ln_1, c_attn, attn_proj, ln_2, c_fc, mlp_proj: each (weight, bias)

    class FixedStep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            for name, t in [("wte", w.wte), ("wpe", w.wpe), ("ln_f_w", w.ln_f[0]), ("ln_f_b", w.ln_f[1]), ("kc", kc), ("vc", vc)]:
                self.register_buffer(name, t)
            for i, layer in enumerate(w.layers):
                for key in keys:
                    self.register_buffer(f"h{i}_{key}_w", layer[key][0])
                    self.register_buffer(f"h{i}_{key}_b", layer[key][1])
            self.register_buffer("rows", torch.arange(kc.shape[2], device=kc.device))
            self.register_buffer("logits", torch.zeros(w.cfg["vocab_size"], device=kc.device))

        def forward(self, tok, pos):
            x = self.wte.index_select(0, tok) + self.wpe.index_select(0, pos)  # (1, C)
            masked = self.rows > pos  # (N)
            for layer in range(len(w.layers)):
                p = {key: (getattr(self, f"h{layer}_{key}_w"), getattr(self, f"h{layer}_{key}_b")) for key in keys}
                q, k, v = model.qkv(x, p)  # (nh, 1, hs)
                self.kc[layer].index_copy_(1, pos, k)
                self.vc[layer].index_copy_(1, pos, v)
                att = (q @ self.kc[layer].transpose(-2, -1)) * model.scale  # (nh, 1, N)
                att = att.masked_fill(masked, float("-inf"))
                y = (F.softmax(att, dim=-1) @ self.vc[layer]).transpose(0, 1).reshape(1, model.C)
                x = model.block_tail(x, y, p)
            logits = model.head(x, (self.ln_f_w, self.ln_f_b), self.wte)
            self.logits.copy_(logits)
            return logits.argmax(-1, keepdim=True)

    return FixedStep()


def load_hf_gpt2(torch, w, device, error):
    """Hugging Face transformers' GPT2LMHeadModel on the same weights, and the version of transformers."""
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    c = w.cfg
    config = GPT2Config(
        n_layer=c["n_layer"], n_head=c["n_head"], n_embd=c["n_embd"], n_positions=c["n_positions"],
        vocab_size=c["vocab_size"], layer_norm_epsilon=c["layer_norm_epsilon"], activation_function="gelu_new",
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )
    model = GPT2LMHeadModel(config).eval()
    state = {f"transformer.{k}": v for k, v in w.raw.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k != "lm_head.weight" and not MASK_BUFFER.match(k.removeprefix("transformer."))]
    if missing or unexpected:
        raise error(f"Hugging Face GPT2LMHeadModel: missing {missing[:3]}, unexpected {unexpected[:3]}")
    model.tie_weights()
    return model.to(device), transformers.__version__
