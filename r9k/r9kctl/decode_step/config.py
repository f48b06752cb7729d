"""Dimensions of one TP4 rank of Qwen3.8-Flash-Next at decode (docs/semantics.md 1.1), and tiny
configurations with the same structure for CPU tests; every shape the model builds comes from a :class:`StepConfig`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class StepConfig:
    name: str
    # layers: ``groups`` x (``gdn_per_group`` GDN layers, then 1 full-attention layer)
    groups: int = 12
    gdn_per_group: int = 3
    hidden: int = 2560  # HD, one residual stream
    hc: int = 4  # hyper-connection streams; residual width hc * hidden
    lora: int = 320  # HC low-rank width
    down_rows: int = 336  # lora + hc injection rows + zero padding (the merged down weight)
    # GDN, per rank
    gdn_k_heads: int = 4
    gdn_v_heads: int = 12
    gdn_head: int = 128
    conv_width: int = 4
    # attention, per rank
    attn_q_heads: int = 6
    attn_kv_heads: int = 1
    attn_head: int = 256
    attn_rotary: int = 64
    mrope_section: tuple = (11, 11, 10)
    rope_theta: float = 1e7
    page: int = 16
    # QSA indexer (replicated): 4 query heads + 1 key head of 128, rotary on 32 dims, groups of 4 tokens
    idx_heads: int = 4
    idx_head: int = 128
    idx_rotary: int = 32
    idx_group: int = 4
    idx_top_groups: int = 512  # 2048-token budget / 4
    # MoE, per rank (experts TP-sharded: 640 -> 160 intermediate)
    experts: int = 512
    top_k: int = 10
    expert_inter: int = 160
    shared_inter: int = 160
    renormalize: bool = True
    eps: float = 1e-6
    spec_tokens: int = 4  # MTP-3: 1 + 3 tokens a request

    @property
    def layers(self) -> int:
        return self.groups * (self.gdn_per_group + 1)

    @property
    def dim(self) -> int:
        return self.hc * self.hidden

    @property
    def hc_modules(self) -> int:
        """Two per layer plus the final collapse before the LM head."""
        return 2 * self.layers + 1

    def layer_kinds(self) -> list[str]:
        return (["gdn"] * self.gdn_per_group + ["attn"]) * self.groups

    # per-rank linear shapes (N, K)
    @property
    def gdn_qkvz(self) -> tuple[int, int]:
        hk, hv, d = self.gdn_k_heads, self.gdn_v_heads, self.gdn_head
        return 2 * hk * d + 2 * hv * d, self.hidden

    @property
    def gdn_conv_channels(self) -> int:
        return 2 * self.gdn_k_heads * self.gdn_head + self.gdn_v_heads * self.gdn_head

    @property
    def gdn_out(self) -> tuple[int, int]:
        return self.hidden, self.gdn_v_heads * self.gdn_head

    @property
    def attn_qkv(self) -> tuple[int, int]:
        return (2 * self.attn_q_heads + 2 * self.attn_kv_heads) * self.attn_head, self.hidden

    @property
    def attn_o(self) -> tuple[int, int]:
        return self.hidden, self.attn_q_heads * self.attn_head


FLASH_NEXT_TP4 = StepConfig(name="flash-next-tp4")

# Same structure, small enough for the Triton interpreter on two CPU cores: one group (1 GDN + 1 attention),
# dims that keep every kernel's constraints (K % 128 == 0 for block fp8, head dims powers of two).
TINY = StepConfig(
    name="tiny", groups=1, gdn_per_group=1, hidden=128, lora=32, down_rows=48,
    gdn_k_heads=2, gdn_v_heads=4, gdn_head=32,
    attn_q_heads=2, attn_kv_heads=1, attn_head=64, attn_rotary=16, mrope_section=(3, 3, 2),
    idx_heads=2, idx_head=32, idx_rotary=8, idx_top_groups=8,
    experts=16, top_k=4, expert_inter=32, shared_inter=32,
)

# The tiny dimensions at the real depth (12 x (3 GDN, 1 attention) = 48 layers, 97 HC modules): how rounding-size
# differences grow over the whole stack, on the CPU.
TINY_DEEP = replace(TINY, name="tiny-deep", groups=12, gdn_per_group=3)

CONFIGS = {"flash-next-tp4": FLASH_NEXT_TP4, "tiny": TINY, "tiny-deep": TINY_DEEP}


def get_config(name: str, **overrides) -> StepConfig:
    cfg = CONFIGS[name]
    return replace(cfg, **overrides) if overrides else cfg
