"""A decode step reads its state where it lies: one step allocates far less than the state it reads (no copy of a KV
cache, a ring buffer or the running sums per token), counted from torch.profiler's allocation events
(harness.measure.memory), registry-wide over the variants that decode. A ring buffer holds a padded context token as
zeros, so a step that reads the ring in place never meets its values."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.measure.memory import measure_peak_memory
from variants import build_variant, get_variant, list_variants, live_state_bytes

B, H, D, CONTEXT, WINDOW = 1, 2, 64, 2048, 512  # a state of about 1 MB or more: far above a step's own buffers


def _decoders() -> list:
    """(variant, decode_backend, padded) for every variant that decodes, padded and not: eager where its config chooses
    how to step, and also auto (the hand-written kernel on CPU in float32) unpadded; else None."""
    cases = []
    for name in (n for n in list_variants() if get_variant(n).capabilities.decode):
        fields = {field.name for field in dataclasses.fields(get_variant(name).config)}
        chooses = "decode_backend" in fields
        cases += [(name, "eager" if chooses else None, padded) for padded in (False, True)]
        cases += [pytest.param(name, "auto", False, marks=pytest.mark.slow)] if chooses else []
    return cases


@pytest.mark.parametrize("name,backend,padded", _decoders())
def test_a_decode_step_allocates_less_than_a_quarter_of_its_state(name, backend, padded):
    torch.manual_seed(0)
    fields = {field.name for field in dataclasses.fields(get_variant(name).config)}
    config = {"window": WINDOW} if "window" in fields else {}
    attn = build_variant(name, **config, **({"decode_backend": backend} if backend else {})).eval()
    q, k, v = (torch.randn(B, H, CONTEXT + 2, D) for _ in range(3))
    kv_mask = torch.ones(B, CONTEXT, dtype=torch.bool)
    kv_mask[:, : CONTEXT // 4] = not padded  # a left-padded context, or none
    with torch.no_grad():
        attn(q[:, :, :8], k[:, :, :8], v[:, :, :8], causal=True)  # a learnable variant's parameters are made
        state = attn.init_state(k[:, :, :CONTEXT], v[:, :, :CONTEXT], kv_mask=kv_mask if padded else None)
        _, state = attn.step(q[:, :, CONTEXT:-1], k[:, :, CONTEXT:-1], v[:, :, CONTEXT:-1], state)  # checks run once
        t = slice(CONTEXT + 1, CONTEXT + 2)
        peak = measure_peak_memory(lambda: attn.step(q[:, :, t], k[:, :, t], v[:, :, t], state), "cpu").bytes
    live = live_state_bytes(state)
    assert live >= 2**17, f"{name}'s state is too small ({live} B) for this count to mean anything"
    # A copy of the K or the V a step reads is about half the live bytes; a quarter leaves room for the step's buffers.
    assert peak < live / 4, f"{name}: one step allocated {peak} B of its {live} B state: a copy of what it reads?"


@pytest.mark.parametrize("name", ["sliding_window", "window_linear"])
def test_a_padded_context_token_never_reaches_a_ring_step(name):
    attn = build_variant(name, **{**get_variant(name).cls.small_config, "window": 4}).eval()
    q, k, v = (torch.randn(2, 2, 20, 16) for _ in range(3))
    mask = torch.ones(2, 13, dtype=torch.bool)
    mask[0, 9:], mask[1, 2] = False, False  # right padding inside the last window, a hole among the first keys
    padded = ~mask[:, None, :, None].expand(2, 2, 13, 16)
    k[:, :, :13][padded], v[:, :, :13][padded] = float("nan"), float("nan")  # what a padded slot may hold
    with torch.no_grad():
        attn(q[:, :, 13:], k[:, :, 13:], v[:, :, 13:])  # a learnable variant's parameters are made
        state = attn.init_state(k[:, :, :13], v[:, :, :13], kv_mask=mask)
        for t in range(13, 20):
            out, state = attn.step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state)
            assert out.isfinite().all(), f"{name}: step {t} read a padded context token's NaN"
