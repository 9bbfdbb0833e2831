"""Decode under padding and across dtypes by value: the generated tokens and the reference they are scored against are
written out here (softmax over the real context keys and the tokens generated so far, float64), padded keys change
nothing, and the checked generation's error is a float32 rounding in float32 and a bf16 one in bfloat16."""

from __future__ import annotations

import math

import pytest
import torch

from harness.inputs.padding import padding_mask
from harness.measure import MeasureSettings
from harness.measure.decode import DecodePhase
from harness.schema import Cell
from variants import build_config, build_variant

B, H, Hkv, N, S, D = 3, 4, 2, 12, 4, 8
SETTINGS = MeasureSettings(decode_steps=S, error_rows=8)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def cell(dtype="float32", padding=0.4) -> Cell:
    return Cell(
        variant="dense",
        config=build_config("dense").to_dict(),
        seq_len=N,
        kv_len=N,
        batch=B,
        heads=H,
        kv_heads=Hkv,
        head_dim=D,
        dtype=dtype,
        device="cpu",
        causal=True,
        mode="forward",
        phase="decode",
        padding=padding,
        inputs="gaussian",
        seed=0,
    )


def inputs(dtype="float32"):
    g = torch.Generator().manual_seed(7)
    q = torch.randn(B, H, N + S, D, generator=g)
    k, v = (torch.randn(B, Hkv, N + S, D, generator=g) for _ in range(2))
    return tuple(t.to(DTYPES[dtype]) for t in (q, k, v))


def phase(c: Cell, qkv, mask) -> DecodePhase:
    attn = build_variant("dense").to(DTYPES[c.dtype]).eval()
    p = DecodePhase(attn, c, qkv, mask, SETTINGS, torch.device("cpu"))
    p.prepare()
    return p


def written_out(q, k, v, mask):
    """Row N + t of exact causal attention over the prefix, padded context keys left out: (B, H, S, D) float64."""
    q, k, v = (t.double() for t in (q, k, v))
    out = torch.zeros(B, H, S, D, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            g = h // (H // Hkv)  # the K/V head of query head h
            for t in range(S):
                i = N + t
                keys = [j for j in range(i + 1) if j >= N or mask is None or bool(mask[b, j])]
                s = torch.stack([q[b, h, i] @ k[b, g, j] for j in keys]) / math.sqrt(D)
                out[b, h, t] = s.softmax(0) @ v[b, g, keys]
    return out


def test_a_padded_decode_generates_and_is_scored_against_attention_over_the_real_keys_only():
    mask = padding_mask(B, N, 0.4, seed=0)
    assert (~mask).sum() >= B  # the premise: every batch row has padded context keys
    qkv = inputs()
    p = phase(cell(), qkv, mask)
    outs = p.generate(p.fresh_state())
    checked = p.check()
    want = written_out(*qkv, mask)
    assert torch.allclose(p.reference, want, atol=1e-12)
    assert torch.allclose(torch.cat(outs, dim=2).double(), want, atol=1e-5)
    assert checked.errors["rel_l2_error"] < 1e-6


def test_what_a_padded_key_holds_changes_no_generated_token():
    mask = padding_mask(B, N, 0.4, seed=0)
    q, k, v = inputs()
    first = phase(cell(), (q, k, v), mask)
    plain = torch.cat(first.generate(first.fresh_state()), dim=2)
    pad = ~mask[:, None, :, None]  # (B, 1, N, 1)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, :N] = torch.where(pad, 100.0, k[:, :, :N])  # padded keys that would take every weight
    v2[:, :, :N] = torch.where(pad, -50.0, v[:, :, :N])
    p = phase(cell(), (q, k2, v2), mask)
    assert torch.allclose(torch.cat(p.generate(p.fresh_state()), dim=2), plain, atol=1e-6)


@pytest.mark.parametrize("dtype, low, high", [("float32", 0.0, 1e-6), ("bfloat16", 1e-3, 2e-2)])
def test_the_checked_generations_error_is_its_dtypes_rounding(dtype, low, high):
    mask = padding_mask(B, N, 0.4, seed=0)
    qkv = inputs(dtype)
    p = phase(cell(dtype), qkv, mask)
    checked = p.check()
    assert p.reference.dtype == torch.float64
    assert torch.allclose(p.reference, written_out(*qkv, mask), atol=1e-12)  # of the bf16 inputs, in float64
    assert low <= checked.errors["rel_l2_error"] < high, checked.errors
    outs = p.generate(p.fresh_state())
    assert {o.dtype for o in outs} == {DTYPES[dtype]} and {o.shape for o in outs} == {(B, H, 1, D)}


def test_prepare_runs_one_step_of_the_query_shape_on_a_throwaway_state_before_the_checked_one():
    """What a step builds for its shapes (a compiled kernel for the query's heads under GQA) is set-up: prepare takes
    one step with the first token's q, k, v (H query heads against H_kv K/V heads) on a state of its own."""
    c = cell(padding=0.0)
    attn = build_variant("dense").eval()
    seen, step = [], attn.step

    def counting(q_t, k_t, v_t, state):
        seen.append((tuple(q_t.shape), tuple(k_t.shape)))
        return step(q_t, k_t, v_t, state)

    attn.step = counting
    p = DecodePhase(attn, c, inputs(), None, SETTINGS, torch.device("cpu"))
    prepared = p.prepare()
    assert seen == [((B, H, 1, D), (B, Hkv, 1, D))]  # one step, at the query's heads, before anything is checked
    assert prepared.state_bytes == attn.state_bytes(p.fresh_state())  # the prepared state is a fresh one
    assert len(p.generate(p.fresh_state())) == S and len(seen) == 1 + S
