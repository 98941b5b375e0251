"""The benchmark's models, their arithmetic, and where an FSDP2 step turns from
communication-bound to compute-bound. Two kinds (`--model`):

- `blocks` (the default): a Llama-style decoder stack written here (multi-head
  attention, Llama-2's MLP width, a 32768-token vocabulary);
- `hf-llama`: transformers' `LlamaForCausalLM` at Llama-3's proportions (8 key-value
  heads, Llama-3's MLP width: 14336 at width 4096, a 128256-token vocabulary, rope theta
  500000), the model users train; where transformers is installed.

Pure Python except `build_model`, which imports torch (and transformers) inside:
`test_fsdp2_stats.py` checks the arithmetic without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List

# NOTE [peak FLOP/s]
# H100/H200 SXM dense bf16 tensor-core peak, without sparsity: 989.4 TFLOP/s. MFU is
# model FLOPs (below) over this peak times the GPU count.
PEAK_FLOPS = 989e12

MAX_SEQ = 2048  # sequence length is min(tokens per rank, MAX_SEQ); batch makes up the rest
HEAD_DIM = 128
VOCAB = 32768
KINDS = ("blocks", "hf-llama")
# Llama-3-8B's: the vocabulary, the key-value heads, the MLP's multiplier and rounding.
HF_VOCAB = 128256
HF_KV_HEADS = 8


def ffn_dim(width: int, multiple_of: int = 256, multiplier: float = 1.0) -> int:
    """Llama's hidden size of the gated MLP: 2/3 of 4 x width (times Llama-3's 1.3),
    rounded up to `multiple_of` (Llama-3: 1024; 14336 at width 4096)."""
    hidden = int(multiplier * int(2 * (4 * width) / 3))
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


@dataclass(frozen=True)
class ModelConfig:
    """One point of the sweep: the model's shape and this rank's tokens per step."""

    width: int
    depth: int
    seq: int
    batch: int
    vocab: int = VOCAB
    head_dim: int = HEAD_DIM
    kind: str = "blocks"

    @property
    def heads(self) -> int:
        return self.width // self.head_dim

    @property
    def kv_heads(self) -> int:
        """Key-value heads: every head (`blocks`), or Llama-3's 8 (`hf-llama`)."""
        return min(HF_KV_HEADS, self.heads) if self.kind == "hf-llama" else self.heads

    @property
    def ffn(self) -> int:
        return ffn_dim(self.width, 1024, 1.3) if self.kind == "hf-llama" else ffn_dim(self.width)

    @property
    def tokens_per_rank(self) -> int:
        return self.seq * self.batch

    @property
    def shape(self) -> str:
        return f"{self.width}x{self.depth}" if self.kind == "blocks" else f"{self.kind} {self.width}x{self.depth}"

    @property
    def key(self) -> str:
        """Identifies the configuration across modes (rows are matched on it)."""
        k = f"w{self.width}-d{self.depth}-s{self.seq}-b{self.batch}"
        return k if self.kind == "blocks" else f"{self.kind}-{k}"

    @classmethod
    def for_tokens(cls, width: int, depth: int, tokens: int, max_seq: int = MAX_SEQ,
                   kind: str = "blocks") -> "ModelConfig":
        seq = min(tokens, max_seq)
        if tokens % seq:
            raise ValueError(f"tokens per rank {tokens} is not a multiple of the sequence length {seq}")
        if width % HEAD_DIM:
            raise ValueError(f"width {width} is not a multiple of the head size {HEAD_DIM}")
        if kind not in KINDS:
            raise ValueError(f"model {kind!r}: expected one of {', '.join(KINDS)}")
        vocab = HF_VOCAB if kind == "hf-llama" else VOCAB
        return cls(width=width, depth=depth, seq=seq, batch=tokens // seq, vocab=vocab, kind=kind)


def parse_sweep(text: str, max_seq: int = MAX_SEQ, kind: str = "blocks") -> List[ModelConfig]:
    """`"WIDTHxDEPTH:T1,T2;WIDTHxDEPTH:T3"` -> configurations of model `kind`, in the
    order given."""
    configs = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        shape, _, tokens = part.partition(":")
        if not tokens:
            raise ValueError(f"sweep part {part!r}: expected WIDTHxDEPTH:TOKENS[,TOKENS...]")
        width, _, depth = shape.lower().partition("x")
        for t in tokens.split(","):
            configs.append(ModelConfig.for_tokens(int(width), int(depth), int(t), max_seq, kind))
    if not configs:
        raise ValueError("empty sweep")
    return configs


def param_counts(cfg: ModelConfig) -> Dict[str, int]:
    """Parameter counts of the model `build_model` makes (untied embedding and head).

    `matmul` is what enters the 6·N FLOP term: every weight used in a matrix
    multiplication (all blocks' projections and the output head), not the embedding
    (a lookup) and not the norms (negligible, elementwise).
    """
    d, f, v, depth = cfg.width, cfg.ffn, cfg.vocab, cfg.depth
    kv = cfg.kv_heads * cfg.head_dim
    per_block_matmul = 2 * d * d + 2 * d * kv + 3 * d * f  # wq, wo, wk, wv; w1, w3, w2
    per_block = per_block_matmul + 2 * d  # two RMSNorm weights
    embedding, head, final_norm = v * d, v * d, d
    return {
        "embedding": embedding,
        "per_block": per_block,
        "head": head,
        "total": embedding + depth * per_block + final_norm + head,
        "matmul": depth * per_block_matmul + head,
    }


def step_flops(cfg: ModelConfig, world: int) -> float:
    """Model FLOPs of one training step over all ranks (PaLM's appendix B convention).

        FLOPs = 6 · N_matmul · T  +  12 · L · S · d · T

    T = world × tokens per rank, N_matmul from `param_counts` (forward 2 FLOP per
    weight and token, backward 4), S the sequence length, d the width, L the depth.
    The second term is attention's QKᵀ and AV (4·S·d per token and layer forward,
    times 3 with backward). It is counted in full although the attention is causal
    (flash attention skips about half): the usual MFU convention (PaLM, torchtitan),
    so the numbers compare with theirs. Recomputation is not counted (there is none).
    """
    tokens = world * cfg.tokens_per_rank
    dense = 6 * param_counts(cfg)["matmul"] * tokens
    attention = 12 * cfg.depth * cfg.seq * cfg.width * tokens
    return float(dense + attention)


def mfu(flops_per_step: float, step_seconds: float, world: int, peak: float = PEAK_FLOPS) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the peak of `world` GPUs."""
    if step_seconds <= 0:
        return float("nan")
    return flops_per_step / step_seconds / (world * peak)


# NOTE [communication against compute]
# Per step and rank, FSDP2 all-gathers every parameter twice (forward, and again in
# backward) in the parameter dtype (bf16: 2 bytes), and reduce-scatters every gradient
# once in the reduce dtype (4 bytes for fp32, 2 for bf16). With nccl-tests' bus
# bandwidth B (busbw = algbw x (W-1)/W, algbw = the all-gather's output bytes, or the
# reduce-scatter's input bytes, over the time) the link time is
#
#     t_comm = N x (2 x 2 / B_ag + r / B_rs) x (W-1)/W
#
# with N all parameters (embedding included: it is sharded and gathered too). The
# compute time is the step's model FLOPs on one rank over the achieved FLOP/s F:
#
#     t_compute = (6 x N_matmul x T + 12 x L x S x d x T) / F,    T = tokens per rank
#
# The ratio t_comm / t_compute decides the regime: above 1.5 the step is
# communication-bound (the collectives cannot hide behind the GEMMs), below 2/3
# compute-bound, in between balanced. The defaults are lowcon's measured bus bandwidths
# on 2 H200s (all-gather 370 GB/s, reduce-scatter 250 GB/s) and 650 TFLOP/s, about what
# the stack's bf16 GEMMs reach. The ratio falls as 1/T: doubling the tokens halves it.
AG_BUSBW = 370e9
RS_BUSBW = 250e9
ACHIEVED_FLOPS = 650e12
COMM_BOUND_ABOVE = 1.5
COMPUTE_BOUND_BELOW = 2.0 / 3.0


def comm_compute(cfg: ModelConfig, world: int, reduce_bytes: int = 4, ag_busbw: float = AG_BUSBW,
                 rs_busbw: float = RS_BUSBW, flops: float = ACHIEVED_FLOPS) -> Dict[str, Any]:
    """The link time, compute time, their ratio and the regime of one configuration."""
    n = param_counts(cfg)["total"]
    share = (world - 1) / world if world > 1 else 0.0
    t_comm = n * (2 * 2 / ag_busbw + reduce_bytes / rs_busbw) * share
    t_compute = step_flops(cfg, 1) / flops
    ratio = t_comm / t_compute
    if ratio > COMM_BOUND_ABOVE:
        regime = "communication-bound"
    elif ratio < COMPUTE_BOUND_BELOW:
        regime = "compute-bound"
    else:
        regime = "balanced"
    return {"comm_ms": 1e3 * t_comm, "compute_ms": 1e3 * t_compute, "comm_over_compute": ratio, "regime": regime}


def regime_table(configs: List[ModelConfig], world: int = 2, reduce_bytes: int = 4) -> str:
    """One line per configuration: the estimate of `comm_compute` (bench/README.md's table)."""
    lines = [f"{'shape':>8} {'tokens/rank':>11} {'comm ms':>8} {'compute ms':>10} {'ratio':>6}  regime"]
    for c in configs:
        e = comm_compute(c, world, reduce_bytes)
        lines.append(f"{c.shape:>8} {c.tokens_per_rank:>11} {e['comm_ms']:>8.2f} {e['compute_ms']:>10.2f} "
                     f"{e['comm_over_compute']:>6.2f}  {e['regime']}")
    return "\n".join(lines)


def blocks(model: Any) -> Any:
    """The model's decoder layers, each sharded on its own (FSDP2 per layer)."""
    return model.model.layers if hasattr(model, "model") else model.layers


def logits(model: Any, tokens: Any) -> Any:
    """The model's next-token logits for `tokens` (batch, seq)."""
    out = model(tokens)
    return out if not hasattr(out, "logits") else out.logits


def build_hf_llama(cfg: ModelConfig, device: Any) -> Any:
    """transformers' LlamaForCausalLM at `cfg`'s width and depth, Llama-3's proportions
    (module docs), untied embedding and head, SDPA attention, initialised by
    transformers (std 0.02) from the current torch RNG state."""
    import torch

    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        raise SystemExit(f"--model hf-llama needs transformers ({e}): pip install transformers") from e
    config = LlamaConfig(vocab_size=cfg.vocab, hidden_size=cfg.width, intermediate_size=cfg.ffn,
                         num_hidden_layers=cfg.depth, num_attention_heads=cfg.heads,
                         num_key_value_heads=cfg.kv_heads, head_dim=cfg.head_dim,
                         max_position_embeddings=max(cfg.seq, 8192), rope_theta=500000.0, rms_norm_eps=1e-5,
                         tie_word_embeddings=False, attn_implementation="sdpa", use_cache=False)
    with torch.device(device):
        return LlamaForCausalLM(config)


def build_model(cfg: ModelConfig, device: Any) -> Any:
    """The model of `cfg.kind`, built on `device` from the current torch RNG state."""
    if cfg.kind == "hf-llama":
        return build_hf_llama(cfg, device)
    import torch
    import torch.nn.functional as F
    from torch import nn

    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        # Rotary embedding, the "rotate half" form; x: (B, H, S, hd), cos/sin: (S, hd).
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = cfg.width
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(d, d, bias=False) for _ in range(4))

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            b, s, d = x.shape
            q, k, v = (w(x).view(b, s, cfg.heads, cfg.head_dim).transpose(1, 2)
                       for w in (self.wq, self.wk, self.wv))
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(o.transpose(1, 2).reshape(b, s, d))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1 = nn.Linear(cfg.width, cfg.ffn, bias=False)
            self.w3 = nn.Linear(cfg.width, cfg.ffn, bias=False)
            self.w2 = nn.Linear(cfg.ffn, cfg.width, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn_norm = nn.RMSNorm(cfg.width, eps=1e-5)
            self.attn = Attention()
            self.mlp_norm = nn.RMSNorm(cfg.width, eps=1e-5)
            self.mlp = MLP()

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            x = x + self.attn(self.attn_norm(x), cos, sin)
            return x + self.mlp(self.mlp_norm(x))

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(cfg.vocab, cfg.width)
            self.layers = nn.ModuleList(Block() for _ in range(cfg.depth))
            self.norm = nn.RMSNorm(cfg.width, eps=1e-5)
            self.output = nn.Linear(cfg.width, cfg.vocab, bias=False)
            inv = 1.0 / (10000.0 ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
            ang = torch.outer(torch.arange(cfg.seq, dtype=torch.float32), inv)
            ang = torch.cat((ang, ang), dim=-1)
            # Not parameters: FSDP leaves buffers alone; the root casts them to bf16
            # with the other floating-point inputs of the blocks.
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            h = self.embed(tokens)
            s = tokens.shape[1]
            cos, sin = self.cos[:s], self.sin[:s]
            for layer in self.layers:
                h = layer(h, cos, sin)
            return self.output(self.norm(h))

    with torch.device(device):
        model = Decoder()
    # Llama-like scales (std 0.02) so that the loss starts near ln(vocab).
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    return model


