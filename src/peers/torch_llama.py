"""The PyTorch peer's Llama-family model (Llama, Mistral, Qwen2, Qwen3), the way PyTorch users write it: the same
interface as torch_peer.py's GPT2 — forward_cat (the seed's torch.cat cache), forward_static (a cache written in
place), fixed_step_module (fixed shapes, for a CUDA graph or torch.compile) and the transformers model.

The math (Hugging Face's modeling_llama / qwen2 / qwen3): RMSNorm; rotary embeddings in the rotate-half layout,
inverse frequencies rope_theta^(-2i/d) with llama3 scaling where the config has it; grouped-query attention (each
K/V head repeated for its query heads); Qwen2's q/k/v biases; Qwen3's RMSNorm over each q and k head before the
rotation; SwiGLU down(silu(gate(x)) * up(x)); tied or untied output.
"""
import json
import math
import os

ARCHITECTURES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}


def arch_of(raw):
    """The config's Llama-family architecture, as the project reads it: its first `architectures` entry, else its
    model_type; None for any other."""
    names = raw.get("architectures") or []
    if names:
        return ARCHITECTURES.get(names[0])
    model_type = raw.get("model_type")
    return model_type if model_type in ARCHITECTURES.values() else None


def is_llama(raw):
    return arch_of(raw) is not None


def llama_config(raw, error):
    try:
        arch = arch_of(raw)
        heads = int(raw["num_attention_heads"])
        cfg = {
            "arch": arch, "n_layer": int(raw["num_hidden_layers"]), "n_head": heads,
            "n_kv_head": int(raw.get("num_key_value_heads") or heads), "n_embd": int(raw["hidden_size"]),
            # left out: Qwen3Config's default 128; otherwise (and null) hidden_size // heads, as HF reads it
            "head_dim": int(raw.get("head_dim", 128 if arch == "qwen3" else None) or int(raw["hidden_size"]) // heads),
            "intermediate_size": int(raw["intermediate_size"]), "n_positions": int(raw["max_position_embeddings"]),
            "vocab_size": int(raw["vocab_size"]), "eps": float(raw.get("rms_norm_eps", 1e-6)),
            "rope_theta": float(raw.get("rope_theta", 10000.0)), "rope_scaling": raw.get("rope_scaling"),
            "tied": bool(raw.get("tie_word_embeddings", False)),
            "bias": arch == "qwen2", "qk_norm": arch == "qwen3",  # the project refuses other attention biases
        }
    except (KeyError, TypeError, ValueError) as e:
        raise error(f"config.json: missing or bad field ({e})")
    if cfg["n_head"] % cfg["n_kv_head"]:
        raise error(f"config.json: num_attention_heads {cfg['n_head']} is not divisible by num_key_value_heads {cfg['n_kv_head']}")
    return cfg


def inverse_frequencies(torch, cfg):
    d = cfg["head_dim"]
    f = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    s = cfg["rope_scaling"]
    if not s or (s.get("rope_type") or s.get("type")) in (None, "default"):
        return f
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / f
    smooth = (old / wavelen - low) / (high - low)
    blended = (1 - smooth) * f / factor + smooth * f
    return torch.where(wavelen < old / high, f, torch.where(wavelen > old / low, f / factor, blended))


class LlamaWeights:
    """The checkpoint's tensors on a device, in Hugging Face's Linear layout (out, in); shards through the index."""

    def __init__(self, torch, model_dir, device, cfg, read_safetensors, error):
        self.cfg = cfg
        index = os.path.join(model_dir, "model.safetensors.index.json")
        if os.path.exists(os.path.join(model_dir, "model.safetensors")):
            files = ["model.safetensors"]
        else:
            with open(index, encoding="utf-8") as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        raw = {}
        for name in files:
            raw.update(read_safetensors(torch, os.path.join(model_dir, name)))
        self.raw = raw
        C, Q, KV, I = cfg["n_embd"], cfg["n_head"] * cfg["head_dim"], cfg["n_kv_head"] * cfg["head_dim"], cfg["intermediate_size"]

        def get(name, shape):
            t = raw.get(name)
            if t is None:
                raise error(f"{model_dir}: tensor {name} is missing")
            if list(t.shape) != shape:
                raise error(f"{model_dir}: tensor {name} has shape {list(t.shape)}, expected {shape}")
            return t.to(device)

        self.embed = get("model.embed_tokens.weight", [cfg["vocab_size"], C])
        self.layers = []
        for i in range(cfg["n_layer"]):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            layer = {
                "input_norm": get(p + "input_layernorm.weight", [C]),
                "q": get(a + "q_proj.weight", [Q, C]), "k": get(a + "k_proj.weight", [KV, C]),
                "v": get(a + "v_proj.weight", [KV, C]), "o": get(a + "o_proj.weight", [C, Q]),
                "post_norm": get(p + "post_attention_layernorm.weight", [C]),
                "gate": get(p + "mlp.gate_proj.weight", [I, C]), "up": get(p + "mlp.up_proj.weight", [I, C]),
                "down": get(p + "mlp.down_proj.weight", [C, I]),
                "q_bias": None, "k_bias": None, "v_bias": None, "q_norm": None, "k_norm": None,
            }
            if cfg["bias"]:
                layer.update(q_bias=get(a + "q_proj.bias", [Q]), k_bias=get(a + "k_proj.bias", [KV]), v_bias=get(a + "v_proj.bias", [KV]))
            if cfg["qk_norm"]:
                layer.update(q_norm=get(a + "q_norm.weight", [cfg["head_dim"]]), k_norm=get(a + "k_norm.weight", [cfg["head_dim"]]))
            self.layers.append(layer)
        self.norm = get("model.norm.weight", [C])
        self.lm_head = self.embed if cfg["tied"] else get("lm_head.weight", [cfg["vocab_size"], C])
        # cos, sin (positions, head_dim / 2) in float64, stored float32
        f = inverse_frequencies(torch, cfg)
        angles = torch.arange(cfg["n_positions"], dtype=torch.float64)[:, None] * f[None, :]
        self.cos, self.sin = angles.cos().float().to(device), angles.sin().float().to(device)


class Llama:
    """The Llama family's forward pass in plain eager PyTorch."""

    def __init__(self, torch, w):
        self.torch, self.F, self.w = torch, torch.nn.functional, w
        cfg = w.cfg
        self.nh, self.kv_heads, self.hs = cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"]
        self.group = self.nh // self.kv_heads
        self.eps = cfg["eps"]
        self.scale = 1.0 / math.sqrt(self.hs)

    def rms(self, x, weight):
        return x * self.torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def rotate(self, t, positions):
        # t: (heads, T, hs), rotate-half pairs (i, i + hs/2) turned by position × frequency
        cos, sin = self.w.cos[positions], self.w.sin[positions]  # (T, hs/2)
        a, b = t[..., : self.hs // 2], t[..., self.hs // 2:]
        return self.torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    def qkv(self, x, p, positions):
        T = x.shape[0]
        h = self.rms(x, p["input_norm"])
        q = self.F.linear(h, p["q"], p["q_bias"]).view(T, self.nh, self.hs).transpose(0, 1)
        k = self.F.linear(h, p["k"], p["k_bias"]).view(T, self.kv_heads, self.hs).transpose(0, 1)
        v = self.F.linear(h, p["v"], p["v_bias"]).view(T, self.kv_heads, self.hs).transpose(0, 1)
        if p["q_norm"] is not None:
            q, k = self.rms(q, p["q_norm"]), self.rms(k, p["k_norm"])
        return self.rotate(q, positions), self.rotate(k, positions), v

    def attend(self, q, k, v, mask=None):
        # q: (nh, T, hs) at the last T of k's S positions; k, v: (kv_heads, S, hs) → (T, nh·hs)
        T, S = q.shape[1], k.shape[1]
        k, v = k.repeat_interleave(self.group, dim=0), v.repeat_interleave(self.group, dim=0)
        att = (q @ k.transpose(-2, -1)) * self.scale
        if mask is not None:
            att = att.masked_fill(mask, float("-inf"))
        elif T > 1:
            causal = self.torch.ones(T, S, dtype=self.torch.bool, device=q.device).tril(S - T)
            att = att.masked_fill(~causal, float("-inf"))
        return (self.F.softmax(att, dim=-1) @ v).transpose(0, 1).reshape(T, self.nh * self.hs)

    def block_tail(self, x, y, p):
        x = x + self.F.linear(y, p["o"])
        h = self.rms(x, p["post_norm"])
        return x + self.F.linear(self.F.silu(self.F.linear(h, p["gate"])) * self.F.linear(h, p["up"]), p["down"])

    def head(self, x):
        return self.rms(x[-1:], self.w.norm)[0] @ self.w.lm_head.t()

    def forward_cat(self, ids, past):
        S = 0 if past is None else past[0][0].shape[1]
        positions = self.torch.arange(S, S + ids.shape[0], device=ids.device)
        x = self.w.embed[ids]
        new_past = []
        for layer, p in enumerate(self.w.layers):
            q, k, v = self.qkv(x, p, positions)
            if past is not None:
                k = self.torch.cat([past[layer][0], k], dim=1)
                v = self.torch.cat([past[layer][1], v], dim=1)
            new_past.append((k, v))
            x = self.block_tail(x, self.attend(q, k, v), p)
        return self.head(x), new_past

    def forward_static(self, ids, pos, kc, vc):
        T = ids.shape[0]
        positions = self.torch.arange(pos, pos + T, device=ids.device)
        x = self.w.embed[ids]
        for layer, p in enumerate(self.w.layers):
            q, k, v = self.qkv(x, p, positions)
            kc[layer, :, pos:pos + T] = k
            vc[layer, :, pos:pos + T] = v
            x = self.block_tail(x, self.attend(q, kc[layer, :, :pos + T], vc[layer, :, :pos + T]), p)
        return self.head(x)


def llama_fixed_step_module(torch, model, kc, vc):
    """The static step with fixed shapes: token and position on the device, attention over every cache row with the
    rows past the position masked. forward() → next token (1)."""
    w = model.w

    class FixedStep(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("kc", kc)
            self.register_buffer("vc", vc)
            self.register_buffer("rows", torch.arange(kc.shape[2], device=kc.device))
            self.register_buffer("logits", torch.zeros(w.cfg["vocab_size"], device=kc.device))

        def forward(self, tok, pos):
            x = w.embed.index_select(0, tok)  # (1, C)
            masked = self.rows > pos  # (N)
            for layer, p in enumerate(w.layers):
                q, k, v = model.qkv(x, p, pos)
                self.kc[layer].index_copy_(1, pos, k)
                self.vc[layer].index_copy_(1, pos, v)
                x = model.block_tail(x, model.attend(q, self.kc[layer], self.vc[layer], masked), p)
            logits = model.head(x)
            self.logits.copy_(logits)
            return logits.argmax(-1, keepdim=True)

    return FixedStep()


def load_hf_llama(torch, w, device, error):
    """transformers' own model of the architecture, on the same tensors."""
    import transformers

    cfg = w.cfg
    name = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3"}[cfg["arch"]]
    config_class, model_class = getattr(transformers, f"{name}Config"), getattr(transformers, f"{name}ForCausalLM")
    config = config_class(
        vocab_size=cfg["vocab_size"], hidden_size=cfg["n_embd"], intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=cfg["n_layer"], num_attention_heads=cfg["n_head"], num_key_value_heads=cfg["n_kv_head"],
        head_dim=cfg["head_dim"], max_position_embeddings=cfg["n_positions"], rms_norm_eps=cfg["eps"],
        rope_theta=cfg["rope_theta"], rope_scaling=cfg["rope_scaling"], tie_word_embeddings=cfg["tied"],
        **({"attention_bias": cfg["bias"]} if cfg["arch"] in ("llama", "mistral") else {}),
    )
    model = model_class(config).eval()
    missing, unexpected = model.load_state_dict(w.raw, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and cfg["tied"])]
    if missing or unexpected:
        raise error(f"transformers {name}ForCausalLM: missing {missing[:3]}, unexpected {unexpected[:3]}")
    if cfg["tied"]:
        model.tie_weights()
    return model.to(device), transformers.__version__
