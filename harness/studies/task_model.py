"""The tasks study's model: a tiny bidirectional encoder (pre-LN, sinusoidal positions) around a swappable attention."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn

from variants import MultiHeadAttention


class TransformerBlock(nn.Module):
    """Pre-LN transformer block around a swappable attention (dense until TinyTransformer.set_attention)."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attention = MultiHeadAttention(d_model, heads, "dense")
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: Tensor, kv_mask: Tensor | None) -> Tensor:
        x = x + self.attention(self.norm1(x), kv_mask=kv_mask)
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    """Token embeddings + fixed sinusoidal positions, `layers` blocks, a classifier per token or per sequence.

    Fixed positions, not learned ones: offsets like "the previous token" (which MQAR needs) are
    then equally easy at every position, so a short budget is not spent learning N position vectors.
    """

    def __init__(
        self,
        *,
        vocab: int,
        classes: int,
        seq_len: int,
        d_model: int,
        layers: int,
        heads: int,
        per_token: bool,
        value_vocab: int = 0,
    ):
        super().__init__()
        self.per_token = per_token
        self.embed = nn.Embedding(vocab, d_model)
        self.value_embed = nn.Embedding(value_vocab, d_model) if value_vocab else None  # one-hop MQAR's second stream
        self.register_buffer("position", sinusoids(seq_len, d_model), persistent=False)  # (N, E), fixed
        self.blocks = nn.ModuleList(TransformerBlock(d_model, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)

    def set_attention(self, make: Callable[[], nn.Module]) -> None:
        """Put `make()` (a variant) inside every block's MultiHeadAttention."""
        for block in self.blocks:
            block.attention.attention = make()

    def forward(self, tokens: Tensor, mask: Tensor, values: Tensor | None = None) -> Tensor:
        """tokens, mask (and values): (B, N). Returns logits (B, N, classes) per token or (B, classes) per sequence."""
        x = self.embed(tokens) + self.position[: tokens.shape[1]]  # (B, N, E)
        if self.value_embed is not None and values is not None:
            x = x + self.value_embed(values)
        kv_mask = None if bool(mask.all()) else mask
        for block in self.blocks:
            x = block(x, kv_mask)
        x = self.norm(x)
        if self.per_token:
            return self.head(x)  # (B, N, classes)
        weights = mask.to(x.dtype)[..., None]  # (B, N, 1): masked mean pooling over real tokens
        return self.head((x * weights).sum(1) / weights.sum(1).clamp_min(1.0))  # (B, classes)


def sinusoids(N: int, E: int) -> Tensor:
    """(N, E) sine/cosine position codes (Vaswani et al. 2017), wavelengths 2*pi .. 10000*2*pi."""
    position = torch.arange(N, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, E, 2, dtype=torch.float32) / E)  # (E/2,)
    out = torch.zeros(N, E)
    out[:, 0::2] = torch.sin(position * freq)
    out[:, 1::2] = torch.cos(position * freq[: E // 2])
    return out
