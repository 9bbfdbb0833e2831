"""model-eval's generation columns for a causal LM: greedy continuation agreement with dense and decode tokens/s.

Each evaluation window of N tokens is a prompt; `generate(max_new_tokens=T, do_sample=False)` continues it with the
variant swapped in and with exact dense in every layer (through the same adapter, on transformers' KV cache), never
stopping early at an end-of-sequence token, so both give exactly T tokens. The agreement is the share of those T
positions, compared position by position to the end (not only up to the first difference), whose token equals
dense's, over all prompts. Decode speed is the T tokens over the seconds of the variant's generate calls (the prefill
of each prompt included), after one untimed token (what a first call builds once).

The same continuations are then generated through each layer's own decode state (harness.models.hf_decode_state's
VariantStateCache: dense's KV cache, sliding_window's ring, distilled's and window_linear's running sums), where every
layer's variant can decode: the state path's tokens/s, the bytes of every layer's state after the last prompt and its
T tokens (what the model holds to decode at that length), and the share of its tokens that equal the KV-cache path's
(the two compute the same attention, so below 1 only by float32 rounding at a near tie). Where the state path refuses
(a variant without a decode state, the model's softcapping or sink logits), its columns stay empty and
``state_generation_reason`` says why.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor, nn

from harness.measure.timer import Stopwatch
from harness.models import hf_model
from harness.report.render import format_number
from harness.report.study_outcomes import FAILURES
from variants import AttentionVariant, NotSupportedError, build_variant

DEFAULT_TOKENS = 32  # --generate-tokens: tokens generated per prompt (0 turns generation off)


def empty_fields() -> dict[str, Any]:
    """The generation columns of a row before anything is generated (and when generation is off)."""
    return {
        "generated_tokens": None,
        "continuation_agreement": None,
        "decode_tokens_per_s": None,
        "generation_status": None,
        "generation_reason": None,
        "state_decode_tokens_per_s": None,
        "decode_state_bytes": None,
        "state_cache_agreement": None,
        "state_generation_reason": None,
    }


@torch.no_grad()
def continuation(model: nn.Module, ids: Tensor, tokens: int, cache: Any = None) -> list[int]:
    """The `tokens` greedy tokens the model generates after the prompt ids (1, N); `cache`: a VariantStateCache (None:
    transformers' own KV cache)."""
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=tokens,
        do_sample=False,
        eos_token_id=None,  # never stop early: every continuation is `tokens` long
        pad_token_id=0,
        **({} if cache is None else {"cache": cache}),
    )
    return out[0, ids.shape[1] :].tolist()


def agreement(candidate: list[list[int]], reference: list[list[int]]) -> float:
    """The share of positions, over all prompts and position by position to the end, where `candidate`'s token equals
    `reference`'s (the same number of tokens per prompt)."""
    same = sum(c == r for cand, ref in zip(candidate, reference, strict=True) for c, r in zip(cand, ref, strict=True))
    return same / sum(len(ref) for ref in reference)


def dense_continuations(model: nn.Module, own: str, prompts: list[Tensor], tokens: int) -> list[list[int]]:
    """Every prompt's continuation with exact dense in every layer (the reference); the model's own attention after."""
    model.set_attn_implementation(own)
    with hf_model.swapped(model, lambda i: build_variant("dense")):  # each of generate's forwards checked
        return [continuation(model, ids, tokens) for ids in prompts]


def generation_fields(
    model: nn.Module,
    own: str,
    per_layer: dict[int, AttentionVariant],
    layers: list[int],
    prompts: list[Tensor],
    tokens: int,
    reference: Callable[[], list[list[int]]],
    device: str,
    *,
    state: bool = False,
) -> dict[str, Any]:
    """The generation columns of one row: `per_layer` swapped into `layers` (dense in the others) generating `tokens`
    after each prompt, against `reference()` (dense's); with `state`, the own-state path's columns too (state_fields).
    Status unsupported, with the reason and no number, for a variant without Capabilities.causal_offset or one the
    adapter refuses."""
    fields = {**empty_fields(), "generated_tokens": tokens}
    lacking = sorted({v.name for v in per_layer.values() if not v.capabilities.causal_offset})
    if lacking:
        reason = f"{', '.join(lacking)} cannot decode against a KV cache (Capabilities.causal_offset is False)"
        return {**fields, "generation_status": "unsupported", "generation_reason": reason}
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and prompts and prompts[0].shape[1] + tokens > limit:
        reason = (
            f"{prompts[0].shape[1]} prompt + {tokens} generated tokens exceed the model's max_position_embeddings "
            f"{limit}; pass a shorter --seq-lens or fewer --generate-tokens"
        )
        return {**fields, "generation_status": "unsupported", "generation_reason": reason}
    expected = reference()
    model.set_attn_implementation(own)
    try:
        with hf_model.swapped(model, lambda i: per_layer[i], layers=layers):
            continuation(model, prompts[0], 1)  # untimed: what a first generate builds once (as state_fields does)
            with Stopwatch(device) as watch:
                found = [continuation(model, ids, tokens) for ids in prompts]
    except NotSupportedError as exc:
        return {**fields, "generation_status": "unsupported", "generation_reason": "; ".join(exc.reasons)}
    return {
        **fields,
        "continuation_agreement": agreement(found, expected),
        "decode_tokens_per_s": tokens * len(prompts) / watch.seconds,
        "generation_status": "ok",
        **(state_fields(model, per_layer, layers, prompts, tokens, found, device) if state else {}),
    }


def state_fields(
    model: nn.Module,
    per_layer: dict[int, AttentionVariant],
    layers: list[int],
    prompts: list[Tensor],
    tokens: int,
    through_cache: list[list[int]],
    device: str,
) -> dict[str, Any]:
    """The state path's columns (the module doc): the same continuations generated through a VariantStateCache per
    prompt, after one untimed token (what a first step builds once: the kernels' library, a compile); or
    state_generation_reason where the state path refuses or fails."""
    from harness.models.hf_decode_state import VariantStateCache  # transformers: only with the [hf] extra (model-eval)

    lacking = sorted({v.name for v in per_layer.values() if not v.capabilities.decode})
    if lacking:
        return {"state_generation_reason": f"{', '.join(lacking)} has no decode state (Capabilities.decode is False)"}
    found = []
    try:
        with hf_model.swapped(model, lambda i: per_layer[i], layers=layers):
            continuation(model, prompts[0], 1, VariantStateCache(model))
            with Stopwatch(device) as watch:
                for ids in prompts:
                    cache = VariantStateCache(model)
                    found.append(continuation(model, ids, tokens, cache))
    except NotSupportedError as exc:
        return {"state_generation_reason": "; ".join(exc.reasons)}
    except (*FAILURES, RuntimeError, IndexError) as exc:  # a failed step: a reason on the row, not a failed run
        return {"state_generation_reason": f"{type(exc).__name__}: {exc}"}
    return {
        "state_decode_tokens_per_s": tokens * len(prompts) / watch.seconds,
        "decode_state_bytes": cache.state_bytes(),
        "state_cache_agreement": agreement(found, through_cache),
    }


def agreement_or_refusal(*args: Any) -> float:
    """generation_fields(*args)'s continuation agreement, or NotSupportedError with its reason where there is none (the
    variant cannot generate)."""
    found = generation_fields(*args)
    if found["generation_status"] != "ok":
        raise NotSupportedError(found["generation_reason"])
    return found["continuation_agreement"]


def generation_text(row: dict[str, Any]) -> str:
    """The generation columns of a row for a terminal line: agreement and tokens/s, or why there are none."""
    if row.get("generation_status") != "ok":
        return f"generation {row.get('generation_status')}: {row.get('generation_reason')}"
    agreement, speed = row.get("continuation_agreement"), row.get("decode_tokens_per_s")
    text = f"continuation agreement {format_number(agreement, '.3f')}, {format_number(speed, '.1f')} tokens/s"
    if row.get("state_decode_tokens_per_s") is None:
        return text + (f"; state path: {row['state_generation_reason']}" if row.get("state_generation_reason") else "")
    state_mib = format_number(row["decode_state_bytes"] / 2**20, ".2f")
    return text + f"; own state {format_number(row['state_decode_tokens_per_s'], '.1f')} tokens/s, {state_mib} MiB"
