"""MultiHeadAttention: W^Q, W^K, W^V, W^O around any registered variant, on x of shape (B, N, E)."""

from __future__ import annotations

from typing import Any

from einops import rearrange
from torch import Tensor, nn

from variants._checks import check_int
from variants._registry import build_variant


class MultiHeadAttention(nn.Module):
    """Drop-in self-attention layer: project x to heads, run a variant, merge heads, project out.

    The variant scales scores by 1/sqrt(head_dim) (head_dim = embed_dim // num_heads), not by
    1/sqrt(embed_dim) as some tutorials do; masking uses -inf/bool masks, safe in float16.

    Args:
        embed_dim: model width E.
        num_heads: H; must divide embed_dim.
        variant: a registered variant name (see variants.list_variants()).
        bias: add biases to the four projections.
        kv_heads: K/V heads H_kv for grouped-query attention (it must divide num_heads; 1 = MQA);
            default num_heads. W^K and W^V then project to kv_heads * head_dim.
        **config: fields of the variant's config, e.g. window=128 for sliding_window.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        variant: str = "dense",
        *,
        bias: bool = True,
        kv_heads: int | None = None,
        **config: Any,
    ):
        super().__init__()
        check_int("embed_dim", embed_dim, minimum=1)
        check_int("num_heads", num_heads, minimum=1)
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads}); "
                f"e.g. num_heads={_divisor_near(embed_dim, num_heads)}"
            )
        kv_heads = num_heads if kv_heads is None else kv_heads
        check_int("kv_heads", kv_heads, minimum=1)
        if num_heads % kv_heads:
            raise ValueError(
                f"kv_heads ({kv_heads}) must divide num_heads ({num_heads}) for grouped-query attention; "
                f"e.g. kv_heads={_divisor_near(num_heads, kv_heads)}"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.kv_heads = kv_heads
        self.head_dim = embed_dim // num_heads
        kv_dim = kv_heads * self.head_dim
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, kv_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, kv_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.attention = build_variant(variant, **config)

    def forward(self, x: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None) -> Tensor:
        """x: (B, N, E); kv_mask: bool (B, N), True = real token. Returns (B, N, E)."""
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.embed_dim:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"x must have shape (B, N, embed_dim={self.embed_dim}), got {shape}")
        q = rearrange(self.q_proj(x), "b n (h d) -> b h n d", h=self.num_heads)  # (B, H, N, D)
        k, v = (
            rearrange(proj(x), "b n (h d) -> b h n d", h=self.kv_heads)  # (B, H_kv, N, D)
            for proj in (self.k_proj, self.v_proj)
        )
        out = self.attention(q, k, v, causal=causal, kv_mask=kv_mask)  # (B, H, N, D)
        return self.out_proj(rearrange(out, "b h n d -> b n (h d)"))


def _divisor_near(n: int, target: int) -> int:
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return min(divisors, key=lambda d: abs(d - target))
