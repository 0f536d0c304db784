# SPDX-License-Identifier: MIT
"""A reference of the engines' tensor-parallel layouts, independent of wcd.

It reads safetensors files itself (the 8-byte header length, the JSON
header, the raw bytes: every dtype is kept as unsigned words of its width,
so BF16 and F8 need no float support) and config.json, then applies the
rules that vLLM's loaders apply (read in vLLM's sources, written anew here):

- QKVParallelLinear: q by whole heads, rank r holds heads [r*n/tp, ...);
  k and v by whole KV heads, and when tp >= kv_heads every KV head is
  replicated on tp / kv_heads ranks: rank r holds KV head r // replicas.
  Fused qkv_proj = [q_r; k_r; v_r] on dim 0 (bias likewise). A checkpoint
  that is already fused (Phi-3's qkv_proj) is split into its q, k, v parts
  by the whole-model sizes first, and each part is sliced as above.
- MergedColumnParallelLinear: gate and up each split evenly on dim 0,
  gate_up_proj = [gate_r; up_r] (Phi-3's fused gate_up_proj split in two
  halves first).
- RowParallelLinear: o_proj by the same heads on dim 1, down_proj evenly on
  dim 1; a row-parallel bias is whole on every rank.
- VocabParallelEmbedding / ParallelLMHead: V padded to a multiple of 64,
  P = padded / tp rows per rank, rank r holds rows [rP, min((r+1)P, V)) and
  zeros after them: the checkpoint-named tensor has the real rows as its
  shape and announces padded_rows = P.
- FusedMoE: w13_weight [E_local, 2 I_r, H] = per expert [w1_r; w3_r],
  w2_weight [E_local, H, I_r]; with tp the intermediate I is split (I_r =
  I / tp), with ep a rank holds the contiguous block of experts vLLM's
  determine_expert_map gives it (base = E // ep, the first E % ep ranks one
  more, start = rank * base + min(rank, E % ep)) with the whole I. The
  router (gate, e_score_correction_bias) is replicated; DeepSeek's shared
  experts are a DeepseekV2MLP, split by tp like any MLP.
- Block FP8: a weight_scale_inv follows its weight in block units
  (weight_block_size); a cut that is not on a block edge is refused.
- MLA (DeepSeek-V2/V3): q_a_proj, kv_a_proj_with_mqa and their norms are
  replicated, q_b_proj (or q_proj without q_lora_rank) by heads of
  qk_nope_head_dim + qk_rope_head_dim, kv_b_proj by heads of
  qk_nope_head_dim + v_head_dim, o_proj by heads of v_head_dim on dim 1;
  fused_qkv_a_proj = [q_a_proj; kv_a_proj_with_mqa], replicated.
- Everything else (norms, q/k norms, routers) is replicated.
- Tied embeddings (tie_word_embeddings, no lm_head.weight on disk): vLLM's
  LM head is the embedding itself; lm_head.weight is served as an alias.

plan() returns, for one rank, every served tensor: checkpoint names (this
rank's part) and the fused views (vLLM's parameter names), each with its
bytes; a layout the engines refuse raises Refused naming why.
"""
import json
import os
import re
import struct

import numpy as np

try:
    import xxhash
except ImportError:  # the reference works without it; hashes need it
    xxhash = None

DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}
WORD = {1: "<u1", 2: "<u2", 4: "<u4", 8: "<u8"}
VOCAB_PAD = 64
HEADER_MAX = 100 << 20


class Refused(Exception):
    """The engines refuse this layout (heads, blocks or sizes do not divide)."""


class Tensor:
    """A tensor's dtype name and its elements as unsigned words."""

    def __init__(self, dtype, a, padded_rows=None):
        self.dtype = dtype
        self.a = a
        self.padded_rows = padded_rows

    @property
    def shape(self):
        return list(self.a.shape)

    def tobytes(self):
        return np.ascontiguousarray(self.a).tobytes()

    def hash(self):
        return xxh3_128(self.tobytes())


def xxh3_128(b):
    """Canonical (big-endian) hex, as `xxhsum -H2` prints it."""
    return xxhash.xxh3_128(b).hexdigest()


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    n = struct.unpack("<Q", raw[:8])[0]
    if n > HEADER_MAX or 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} past the file's {len(raw)} bytes")
    hdr = json.loads(raw[8:8 + n])
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, info in hdr.items():
        if name == "__metadata__":
            continue
        dt, shape = info["dtype"], info["shape"]
        b, e = info["data_offsets"]
        w = DTYPE_BYTES[dt]
        count = int(np.prod(shape)) if shape else 1
        if e - b != count * w or e > len(data):
            raise ValueError(f"{path}: tensor {name}: {e - b} bytes for {dt} {shape}")
        a = np.frombuffer(data[b:e], dtype=WORD[w]).reshape(shape)
        out[name] = Tensor(dt, a)
    return out


class Checkpoint:
    def __init__(self, path):
        self.path = path
        with open(os.path.join(path, "config.json")) as f:
            self.config = json.load(f)
        self.tensors = {}
        for f in sorted(os.listdir(path)):
            if f.endswith(".safetensors"):
                for k, v in read_safetensors(os.path.join(path, f)).items():
                    if k in self.tensors:
                        raise ValueError(f"{path}: tensor {k} in two shards")
                    self.tensors[k] = v
        self.arch = (self.config.get("architectures") or ["?"])[0]
        q = self.config.get("quantization_config") or {}
        self.block = q.get("weight_block_size")

    def c(self, *keys, default=None):
        for k in keys:
            if self.config.get(k) is not None:
                return self.config[k]
        return default


DENSE = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
         "Qwen3ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
         "Phi3ForCausalLM"}
MOE = {"MixtralForCausalLM", "Qwen3MoeForCausalLM"}
MLA = {"DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"}
ARCHS = DENSE | MOE | MLA


def divide(a, b, what):
    if b <= 0 or a % b:
        raise Refused(f"{what}: {a} does not divide by {b}")
    return a // b


def expert_block(E, ep, rank):
    """vLLM's linear expert map: (first expert, count) of this ep rank."""
    base, rem = E // ep, E % ep
    return rank * base + min(rank, rem), base + (1 if rank < rem else 0)


class Layout:
    """One rank's plan; see the module comment for the rules."""

    def __init__(self, ck, tp=1, rank=0, ep=1, ep_rank=0, pad=VOCAB_PAD):
        if not 0 <= rank < tp or not 0 <= ep_rank < ep:
            raise ValueError(f"rank {rank}/{tp}, ep rank {ep_rank}/{ep}")
        self.ck, self.tp, self.r, self.ep, self.er = ck, tp, rank, ep, ep_rank
        self.pad = pad
        self.out = {}
        cf = ck.config
        if ck.arch not in ARCHS:
            if tp > 1 or ep > 1:
                raise Refused(f"architecture {ck.arch} has no layout at tp {tp}")
        self.nh = cf.get("num_attention_heads", 1)
        self.nkv = cf.get("num_key_value_heads") or self.nh
        self.hd = cf.get("head_dim") or (cf.get("hidden_size", 0) // max(self.nh, 1))
        if ck.arch in MOE or ck.arch in MLA:
            E = ck.c("num_local_experts", "num_experts", "n_routed_experts")
            if ep > 1:
                if E is None or ep > E:
                    raise Refused(f"ep {ep} with {E} experts")
                self.e0, self.ne = expert_block(E, ep, ep_rank)
            else:
                self.e0, self.ne = 0, E
            self.E = E
        elif ep > 1:
            raise Refused(f"ep {ep} on {ck.arch}, which has no experts")

    # -- slicing, in elements of dim 0 or dim 1 -------------------------

    def scale_of(self, name):
        if name.endswith(".weight") and self.ck.block:
            return self.ck.tensors.get(name[: -len(".weight")] + ".weight_scale_inv")
        return None

    def rows(self, t, b, n, name, blk=None):
        """t[b:b+n] on dim 0; blk = block size when t is a block scale."""
        if blk:
            if b % blk or n % blk:
                raise Refused(f"{name}: rows [{b}, {b + n}) are not on {blk}-blocks")
            b, n = b // blk, n // blk
        return t.a[b:b + n]

    def cols(self, t, b, n, name, blk=None):
        if blk:
            if b % blk or n % blk:
                raise Refused(f"{name}: columns [{b}, {b + n}) are not on {blk}-blocks")
            b, n = b // blk, n // blk
        return t.a[:, b:b + n]

    def put(self, name, dtype, a, padded_rows=None):
        assert name not in self.out, name
        self.out[name] = Tensor(dtype, np.ascontiguousarray(a), padded_rows)

    def sliced(self, name, t, b, n, dim):
        """This rank's [b, b+n) of t on dim, with its block scale if any."""
        f = self.rows if dim == 0 else self.cols
        if t.a.ndim == 1 and dim == 1:
            return t.a, None  # a row-parallel bias is whole
        a = f(t, b, n, name)
        s = self.scale_of(name)
        sa = None
        if s is not None:
            blk = self.ck.block[0] if dim == 0 else self.ck.block[1]
            sa = f(s, b, n, name, blk)
        return a, sa

    def emit(self, name, t, b, n, dim):
        a, sa = self.sliced(name, t, b, n, dim)
        self.put(name, t.dtype, a)
        if sa is not None:
            sname = name[: -len(".weight")] + ".weight_scale_inv"
            self.put(sname, self.ck.tensors[sname].dtype, sa)

    def heads(self, nheads, hd, what):
        per = divide(nheads, self.tp, f"{what}: {nheads} heads over tp")
        return self.r * per * hd, per * hd

    def kv_heads(self, hd, what):
        if self.tp >= self.nkv:
            rep = divide(self.tp, self.nkv, f"{what}: tp over {self.nkv} KV heads")
            return (self.r // rep) * hd, hd
        per = divide(self.nkv, self.tp, f"{what}: {self.nkv} KV heads over tp")
        return self.r * per * hd, per * hd

    def even(self, size, what):
        per = divide(size, self.tp, f"{what}: {size} over tp")
        return self.r * per, per

    # -- the families ----------------------------------------------------

    def build(self):
        ck = self.ck
        names = sorted(ck.tensors)
        done = set()
        if ck.arch not in ARCHS:
            for n in names:
                self.put(n, ck.tensors[n].dtype, ck.tensors[n].a)
            return self.out
        for n in names:
            if n.endswith(".weight_scale_inv") and ck.block:
                w = n[: -len(".weight_scale_inv")] + ".weight"
                if w in ck.tensors:
                    continue  # emitted with its weight
            if n in done:
                continue
            self.one(n, ck.tensors[n])
        self.fuse()
        if ck.config.get("tie_word_embeddings") and "lm_head.weight" not in ck.tensors \
                and "model.embed_tokens.weight" in self.out:
            # vLLM's tied ParallelLMHead is the embedding: one tensor, two names
            self.out["lm_head.weight"] = self.out["model.embed_tokens.weight"]
        return self.out

    def one(self, n, t):
        ck = self.ck
        m = re.search(r"\.layers\.(\d+)\.(.*)$", n)
        rest = m.group(2) if m else n
        if n in ("model.embed_tokens.weight", "lm_head.weight"):
            return self.vocab(n, t)
        if not m:
            return self.put(n, t.dtype, t.a)
        # attention
        if ck.arch in MLA:
            mla = self.mla(n, rest, t)
            if mla:
                return
        if re.fullmatch(r"self_attn\.q_proj\.(weight|bias)", rest):
            b, k = self.heads(self.nh, self.hd, n)
            return self.emit(n, t, b, k, 0)
        if re.fullmatch(r"self_attn\.[kv]_proj\.(weight|bias)", rest):
            b, k = self.kv_heads(self.hd, n)
            return self.emit(n, t, b, k, 0)
        if rest == "self_attn.o_proj.weight":
            b, k = self.heads(self.nh, self.hd, n)
            return self.emit(n, t, b, k, 1)
        if rest == "self_attn.qkv_proj.weight":  # Phi-3: fused on disk
            return self.phi3_qkv(n, t)
        if rest == "mlp.gate_up_proj.weight":    # Phi-3
            return self.phi3_gate_up(n, t)
        # experts
        e = re.fullmatch(r"(block_sparse_moe|mlp)\.experts\.(\d+)\.(w1|w2|w3|gate_proj|up_proj|down_proj)\.(weight)", rest)
        if e:
            x = int(e.group(2))
            if not self.e0 <= x < self.e0 + self.ne:
                return  # another ep rank's expert
            down = e.group(3) in ("w2", "down_proj")
            if self.ep > 1:  # whole experts
                return self.emit(n, t, 0, t.a.shape[1 if down else 0], 1 if down else 0)
            size = t.a.shape[1 if down else 0]
            b, k = self.even(size, n)
            return self.emit(n, t, b, k, 1 if down else 0)
        # dense MLPs and shared experts
        d = re.fullmatch(r"mlp\.(shared_experts\.)?(gate_proj|up_proj|down_proj)\.weight", rest)
        if d:
            down = d.group(2) == "down_proj"
            b, k = self.even(t.a.shape[1 if down else 0], n)
            return self.emit(n, t, b, k, 1 if down else 0)
        if t.a.ndim >= 2 and "norm" not in rest and not re.search(r"\.gate\.", "." + rest):
            raise Refused(f"{n}: no rule for a {t.a.ndim}-D tensor of {ck.arch}")
        return self.put(n, t.dtype, t.a)  # norms, routers, biases of norms

    def vocab(self, n, t):
        V = t.a.shape[0]
        padded = -(-V // self.pad) * self.pad
        P = divide(padded, self.tp, f"{n}: {padded} padded rows over tp")
        lo, hi = min(self.r * P, V), min((self.r + 1) * P, V)
        self.put(n, t.dtype, t.a[lo:hi], padded_rows=P)

    def phi3_qkv(self, n, t):
        q, kv = self.nh * self.hd, self.nkv * self.hd
        parts = [(0, q, False), (q, kv, True), (q + kv, kv, True)]
        out = []
        for off, size, is_kv in parts:
            b, k = (self.kv_heads if is_kv else (lambda hd, w: self.heads(self.nh, hd, w)))(self.hd, n)
            out.append(t.a[off + b:off + b + k])
        self.put(n, t.dtype, np.concatenate(out, 0))

    def phi3_gate_up(self, n, t):
        i = t.a.shape[0] // 2
        b, k = self.even(i, n)
        self.put(n, t.dtype, np.concatenate([t.a[b:b + k], t.a[i + b:i + b + k]], 0))

    def mla(self, n, rest, t):
        cf = self.ck.config
        nope, rope = cf["qk_nope_head_dim"], cf["qk_rope_head_dim"]
        v = cf["v_head_dim"]
        if re.fullmatch(r"self_attn\.(q_a_proj|kv_a_proj_with_mqa|q_a_layernorm|kv_a_layernorm)\.\w+", rest):
            self.put(n, t.dtype, t.a)
            if self.scale_of(n) is not None:
                s = n[: -len(".weight")] + ".weight_scale_inv"
                self.put(s, self.ck.tensors[s].dtype, self.ck.tensors[s].a)
            return True
        if rest in ("self_attn.q_b_proj.weight", "self_attn.q_proj.weight"):
            b, k = self.heads(self.nh, nope + rope, n)
            self.emit(n, t, b, k, 0)
            return True
        if rest == "self_attn.kv_b_proj.weight":
            b, k = self.heads(self.nh, nope + v, n)
            self.emit(n, t, b, k, 0)
            return True
        if rest == "self_attn.o_proj.weight":
            b, k = self.heads(self.nh, v, n)
            self.emit(n, t, b, k, 1)
            return True
        return False

    # -- fused views (vLLM's parameter names) ----------------------------

    def cat(self, name, parts, axis=0):
        got = [self.out.get(p) for p in parts]
        if any(g is None for g in got):
            return False
        self.put(name, got[0].dtype, np.concatenate([g.a for g in got], axis))
        return True

    def fuse(self):
        layers = sorted({int(m.group(1)) for n in self.ck.tensors
                         for m in [re.search(r"\.layers\.(\d+)\.", n)] if m})
        pre = "model.layers.%d."
        for L in layers:
            p = pre % L
            for suf in ("weight", "bias", "weight_scale_inv"):
                self.cat(f"{p}self_attn.qkv_proj.{suf}",
                         [f"{p}self_attn.{x}_proj.{suf}" for x in "qkv"])
                for mlp in ("mlp.", "mlp.shared_experts."):
                    self.cat(f"{p}{mlp}gate_up_proj.{suf}",
                             [f"{p}{mlp}gate_proj.{suf}", f"{p}{mlp}up_proj.{suf}"])
                self.cat(f"{p}self_attn.fused_qkv_a_proj.{suf}",
                         [f"{p}self_attn.q_a_proj.{suf}",
                          f"{p}self_attn.kv_a_proj_with_mqa.{suf}"])
            if self.ck.arch in MOE or self.ck.arch in MLA:
                self.experts(p)

    def experts(self, p):
        if self.ck.arch == "MixtralForCausalLM":
            base, w1, w2, w3 = p + "block_sparse_moe.experts.", "w1", "w2", "w3"
        else:
            base, w1, w2, w3 = p + "mlp.experts.", "gate_proj", "down_proj", "up_proj"
        for suf, fsuf in (("weight", ""), ("weight_scale_inv", "_scale_inv")):
            w13, w2s = [], []
            for e in range(self.e0, self.e0 + (self.ne or 0)):
                a, b, c = (self.out.get(f"{base}{e}.{x}.{suf}") for x in (w1, w3, w2))
                if a is None or b is None or c is None:
                    break
                w13.append(np.concatenate([a.a, b.a], 0))
                w2s.append(c.a)
            else:
                if w13:
                    dt = self.out[f"{base}{self.e0}.{w1}.{suf}"].dtype
                    self.put(f"{base}w13_weight{fsuf}", dt, np.stack(w13))
                    self.put(f"{base}w2_weight{fsuf}", dt, np.stack(w2s))


def plan(ck, tp=1, rank=0, ep=1, ep_rank=0, pad=VOCAB_PAD):
    return Layout(ck, tp, rank, ep, ep_rank, pad).build()


def layouts(ck, tps=(1, 2, 4, 8), eps=(2, 4)):
    """Every (tp, ep) this reference is asked about for ck: ep only for MoE."""
    out = [(tp, 1) for tp in tps]
    if ck.arch in MOE or ck.arch in MLA:
        out += [(1, ep) for ep in eps]
    return out


def plan_all(ck, tp, ep=1):
    """Every rank's plan, or Refused. With ep, rank i is tp rank 0 of 1 and
    ep rank i."""
    if ep > 1:
        return [plan(ck, tp, 0, ep, i) for i in range(ep)]
    return [plan(ck, tp, r) for r in range(tp)]


FUSED_RE = re.compile(r"\.(qkv_proj|gate_up_proj|fused_qkv_a_proj)\.|\.experts\.w(13|2)_weight")


def is_view(ck, name):
    """A fused view (not a checkpoint name)."""
    return name not in ck.tensors


def coverage(ck, tp, ep=1, pad=VOCAB_PAD):
    """Counts, over every rank's checkpoint-named tensors, how many times
    each checkpoint element is served, by planning a copy of ck whose
    elements are their own indices. Returns {name: counts array}, and the
    number of padded zero rows over all ranks per vocab tensor."""
    idx = Checkpoint.__new__(Checkpoint)
    idx.__dict__.update(ck.__dict__)
    idx.tensors = {}
    base = 1
    owner = {}
    for n, t in sorted(ck.tensors.items()):
        size = t.a.size
        idx.tensors[n] = Tensor(t.dtype, np.arange(base, base + size, dtype=np.int64).reshape(t.a.shape))
        owner[n] = (base, size)
        base += size
    counts = {n: np.zeros(s, dtype=np.int64) for n, (b, s) in owner.items()}
    pads = {}
    for out in plan_all(idx, tp, ep):
        for n, t in out.items():
            if is_view(ck, n):
                continue
            b, s = owner[n]
            v = t.a.reshape(-1) - b
            assert v.min() >= 0 and v.max() < s, n
            counts[n] += np.bincount(v, minlength=s)
            if t.padded_rows is not None:
                pads[n] = pads.get(n, 0) + t.padded_rows - t.a.shape[0]
    return counts, pads


def view_parts(ck, want):
    """{fused view: [its parts, in order]} for the reference's plan."""
    out = {}
    for n in want:
        if not is_view(ck, n):
            continue
        if n == "lm_head.weight":  # the tied alias
            out[n] = ["model.embed_tokens.weight"]
        elif ".experts.w13_weight" in n or ".experts.w2_weight" in n:
            base = n[: n.index(".experts.") + len(".experts.")]
            suf = ".weight_scale_inv" if n.endswith("_scale_inv") else ".weight"
            mix = ".block_sparse_moe." in n
            ws = ("w1", "w3") if mix else ("gate_proj", "up_proj")
            if ".w2_weight" in n:
                ws = ("w2",) if mix else ("down_proj",)
            experts = sorted({int(m.group(1)) for x in want
                              for m in [re.match(re.escape(base) + r"(\d+)\.", x)] if m})
            out[n] = [f"{base}{e}.{w}{suf}" for e in experts for w in ws]
        else:
            m = re.match(r"(.*)\.(qkv_proj|gate_up_proj|fused_qkv_a_proj)\.(\w+)$", n)
            pre, kind, suf = m.groups()
            parts = {"qkv_proj": ("q_proj", "k_proj", "v_proj"),
                     "gate_up_proj": ("gate_proj", "up_proj"),
                     "fused_qkv_a_proj": ("q_a_proj", "kv_a_proj_with_mqa")}[kind]
            out[n] = [f"{pre}.{x}.{suf}" for x in parts]
    return out
