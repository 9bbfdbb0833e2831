"""`llm` inputs: head types with the profile they promise (counted on attention weights), seeded content, and GQA
inputs whose query heads keep their K/V head's structure."""

from __future__ import annotations

import pytest
import torch

from harness.inputs import make_inputs
from harness.inputs.llm import HEAD_TYPES, llm_head_types
from variants import attention_weights

B, H, N, D = 1, 16, 512, 64


def _profile(seed: int = 0, **params) -> dict[str, dict[str, float]]:
    """Per head type: mean sink mass, mass within 16 tokens, entropy and top weight over the second half's rows."""
    q, k, _ = make_inputs("llm", params, B=B, H=H, N=N, D=D, seed=seed)
    types = llm_head_types(B, H, generator=torch.Generator().manual_seed(seed), device="cpu", **params)[0]
    w = attention_weights(q, k, causal=True)[0, :, N // 2 :]  # (H, N/2, N)
    i = torch.arange(N // 2, N)[:, None]
    near = (i - torch.arange(N)[None, :]).abs() < 16
    stats = {
        "sink": w[..., 0].mean(-1),
        "near": (w * near).sum(-1).mean(-1),
        "entropy": -(w * w.clamp_min(1e-30).log()).sum(-1).mean(-1),
        "top": w.amax(-1).mean(-1),
    }
    return {
        HEAD_TYPES[t]: {name: float(s[types == t].mean()) for name, s in stats.items()}
        for t in range(len(HEAD_TYPES))
        if bool((types == t).any())
    }


def test_each_head_type_has_its_profile():
    profile = {}
    for seed in range(4):  # enough draws that every type occurs
        for kind, stats in _profile(seed).items():
            profile.setdefault(kind, stats)
    assert set(profile) == set(HEAD_TYPES)
    assert profile["sink"]["sink"] > 0.4 > 0.2 > profile["local"]["sink"]
    assert profile["local"]["near"] > 0.4 > 0.05 > profile["retrieval"]["near"]
    assert profile["retrieval"]["top"] > 0.6 and profile["retrieval"]["sink"] < 0.3
    assert profile["diffuse"]["entropy"] > 5.0 > 3.0 > profile["local"]["entropy"]


def test_shares_set_the_mix_and_bad_shares_are_refused():
    types = llm_head_types(64, 64, generator=torch.Generator().manual_seed(0), device="cpu")
    shares = [float((types == t).float().mean()) for t in range(4)]
    assert shares == pytest.approx([0.25, 0.50, 0.05, 0.20], abs=0.03)
    with pytest.raises(ValueError, match="summing to at most 1"):
        make_inputs("llm", {"sink": 0.9, "retrieval": 0.2}, B=1, H=2, N=8, D=8)


def test_seeds_vary_the_content_not_only_the_types():
    one, two = (
        make_inputs("llm", {"sink": 0.0, "retrieval": 0.0, "diffuse": 0.0}, B=1, H=2, N=32, D=16, seed=s)
        for s in (1, 2)
    )
    assert all(not torch.equal(a, b) for a, b in zip(one, two))  # every head local in both: the content differs


@pytest.mark.parametrize("name", ["local", "llm"])
@pytest.mark.parametrize("kv_heads", [8, 2, 1])
def test_gqa_query_heads_keep_their_kv_heads_structure(name, kv_heads):
    """Attention mass within |i - j| < 16 per query head: the same structure at every H_kv (issue 27: at H_kv = 2 the
    old inputs paired query heads with another head's keys, mass 0.03-0.36 on `local`)."""
    params = {"sink": 0.0, "retrieval": 0.0, "diffuse": 0.0, "max_decay": 16.0} if name == "llm" else {}
    q, k, _ = make_inputs(name, params, B=1, H=8, N=256, D=32, seed=5, H_kv=kv_heads)
    assert k.shape[1] == kv_heads
    w = attention_weights(q, k)[0]  # (H, N, M)
    i = torch.arange(256)
    near = (w * ((i[:, None] - i[None, :]).abs() < 16)).sum(-1).mean(-1)  # (H,)
    assert float(near.min()) > (0.9 if name == "local" else 0.15), near  # iid keys: 31/256 = 0.12
    groups = near.view(kv_heads, -1)  # a group's query heads share a decay length: alike, none reads a stranger's keys
    assert float((groups.amax(-1) / groups.amin(-1)).max()) < 1.5, near
