"""The `real` input distribution: q, k, v captured from every layer and head of all-MiniLM-L6-v2 on real text.

Windows of N consecutive word pieces of Python's documentation ([CLS] ... [SEP], no padding) run
through the pretrained model; the q, k, v of its 6 layers x 12 heads form a pool of 72 real
attention heads (head_dim 32), and a seeded permutation of that pool fills the H heads asked
for. Needs the optional extra (``pip install 'attnsuite[real]'``); without it the distribution
is unavailable with a reason naming that command. N is at most the model's 512 positions.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

from harness.models import minilm as realmodel
from harness.inputs import QKV, register_inputs

MAX_SEQ_LEN = realmodel.BertConfig().max_positions  # 512: the model's learned position table


def real_input_reasons(B: int, H: int, N: int, M: int, D: int, **_settings: Any) -> list[str]:
    """Why the real input cannot have this shape ([] if it can); any H_kv is fine (every G-th head's K/V is kept)."""
    reason = realmodel.missing_extra_reason()
    if reason:
        return [reason]
    config = realmodel.BertConfig()
    reasons = []
    if D != config.head_dim:
        reasons.append(
            f"{realmodel.MODEL_NAME}'s heads have head_dim {config.head_dim}, got D={D}; pass --head-dims {config.head_dim}"
        )
    if M != N:
        reasons.append(f"real activations are self-attention, so kv_len must equal seq_len, got N={N}, M={M}")
    if H > _pool_size():
        reasons.append(
            f"the model has {_pool_size()} heads in all ({config.num_layers} layers x {config.num_heads}), got H={H}; "
            f"pass --heads of at most {_pool_size()}"
        )
    if not 2 <= N <= MAX_SEQ_LEN:
        reasons.append(
            f"seq_len must be 2..{MAX_SEQ_LEN} (the model's positions), got N={N}; pass --seq-lens of at most {MAX_SEQ_LEN}"
        )
    return reasons


@register_inputs(
    "real", max_seq_len=MAX_SEQ_LEN, availability=realmodel.missing_extra_reason, shape_check=real_input_reasons
)
def real(B: int, H: int, N: int, M: int, D: int, *, generator: torch.Generator, device: torch.device) -> QKV:
    """q, k, v of all-MiniLM-L6-v2 on Python's docs: every layer and head (72 of head_dim 32), N <= 512, extra [real]."""
    reasons = real_input_reasons(B, H, N, M, D)
    if reasons:
        raise ValueError("inputs 'real': " + "; ".join(reasons))
    starts = torch.randint(0, 2**62, (B,), generator=generator, device=generator.device).tolist()
    order = torch.randperm(_pool_size(), generator=generator, device=generator.device).tolist()
    return capture_heads(starts, order[:H], N, device)


def real_qkv(
    N: int, B: int, H: int, D: int, seed: int, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> QKV:
    """Standalone: q (B, H, N, D), k, v from the real model, seeded; raises ValueError naming what to change.

    Raises realmodel.MissingExtraError without the extra.
    """
    realmodel.require_extra()
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    q, k, v = real(B, H, N, N, D, generator=generator, device=torch.device(device))
    return q.to(dtype), k.to(dtype), v.to(dtype)


def capture_heads(starts: list[int], heads: list[int], N: int, device: torch.device | str) -> QKV:
    """q, k, v (len(starts), len(heads), N, 32) float32: the text windows at `starts` (taken modulo the
    corpus length), heads numbered layer * 12 + head within the model."""
    ids = token_windows(starts, N).to(device)  # (B, N)
    model = _capture_model(str(device))
    with torch.no_grad():
        per_layer = model.capture_qkv(ids, torch.ones_like(ids, dtype=torch.bool))  # L x (B, 12, N, 32) each
    index = torch.tensor(heads, device=ids.device)
    q, k, v = (torch.cat([layer[i] for layer in per_layer], dim=1)[:, index] for i in range(3))  # (B, H, N, 32)
    return q.float(), k.float(), v.float()


def token_windows(starts: list[int], N: int) -> Tensor:
    """(len(starts), N) token ids: [CLS], N - 2 consecutive word pieces of the corpus, [SEP]."""
    tokenizer = realmodel.load_tokenizer()
    stream = _token_stream()
    body = N - 2
    rows = []
    for start in starts:
        offset = start % (len(stream) - body)
        rows.append([tokenizer.cls_id, *stream[offset : offset + body], tokenizer.sep_id])
    return torch.tensor(rows, dtype=torch.long)


@functools.lru_cache(maxsize=1)
def _token_stream() -> tuple[int, ...]:
    """Every corpus paragraph's word pieces, one after another."""
    tokenizer = realmodel.load_tokenizer()
    stream: list[int] = []
    for text in realmodel.corpus():
        stream.extend(tokenizer.tokens(text))
    return tuple(stream)


@functools.lru_cache(maxsize=2)
def _capture_model(device: str) -> realmodel.MiniLM:
    """The unmodified model on `device`, kept: capture only reads it."""
    return realmodel.load_model(device=device)


def _pool_size() -> int:
    config = realmodel.BertConfig()
    return config.num_layers * config.num_heads
