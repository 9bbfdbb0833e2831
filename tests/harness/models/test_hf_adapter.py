"""The transformers adapter (extra attnsuite[hf]): every variant inside tiny causal LMs, equal to stock SDPA where exact,
no causal leak through the whole model, and refusals that name the model feature."""

from __future__ import annotations

import pytest
import torch

from harness.models import hf_adapter, hf_layers, hf_model
from tests.helpers.tiny_hf import VOCAB, save_tiny
from variants import AttentionVariant, Capabilities, NotSupportedError, build_variant, get_variant, list_variants

pytestmark = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)
KINDS = ("llama", "qwen2", "mistral", "gemma2")  # GQA 4/2 + RoPE; biases + MQA; a (wide) sliding window; scaling 1/8
N = 48


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {kind: save_tiny(tmp_path_factory.mktemp(kind), kind) for kind in KINDS}


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (2, N), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, N - 12 :] = 0  # right padding: the real tokens' logits must not depend on it
    return ids, mask


def _logits(model, ids, mask=None) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, use_cache=False).logits


def _exact_config(name: str, n: int) -> dict:
    """The variant's small config, with a length-capped quality knob (a window) at n: then it must equal dense."""
    cls = get_variant(name).cls
    config = dict(cls.small_config)
    if cls.quality_knob is not None and cls.quality_knob.at_most_length:
        config[cls.quality_knob.field] = n
    return cls.config_for_length(config, n)


EXACT = [name for name in list_variants() if get_variant(name).cls.capabilities.exact]
CAUSAL = [name for name in list_variants() if get_variant(name).cls.capabilities.causal]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", EXACT)
@pytest.mark.slow
def test_exact_variants_equal_stock_sdpa_with_and_without_padding(folders, kind, name):
    model = hf_model.load_pretrained(str(folders[kind]))
    ids, mask = _batch()
    stock, stock_unpadded = _logits(model, ids, mask), _logits(model, ids)
    hf_model.swap_layers(model, lambda i: build_variant(name, **_exact_config(name, N)))
    ours, ours_unpadded = _logits(model, ids, mask), _logits(model, ids)
    assert model.config._attn_implementation.startswith(hf_adapter.PREFIX)
    assert torch.allclose(ours_unpadded, stock_unpadded, atol=2e-5, rtol=1e-5)
    real = mask.bool()
    assert torch.allclose(ours[real], stock[real], atol=2e-5, rtol=1e-5)
    assert torch.allclose(ours[1, : N - 12], ours_unpadded[1, : N - 12], atol=2e-5)  # padding changes no real token


@pytest.mark.parametrize("name", CAUSAL)
def test_no_causal_leak_through_the_whole_model(folders, name):
    model = hf_model.load_pretrained(str(folders["llama"]))
    torch.manual_seed(0)
    hf_model.swap_layers(model, lambda i: build_variant(name, **get_variant(name).cls.small_config))
    ids, _ = _batch()
    changed = ids.clone()
    t = N // 2
    changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % VOCAB
    before, after = _logits(model, ids), _logits(model, changed)
    assert torch.equal(before[:, : t + 1], after[:, : t + 1])
    assert not torch.allclose(before[:, t + 1 :], after[:, t + 1 :])  # the change does reach later positions


def test_a_narrower_window_changes_the_logits(folders):
    """The swap is really in the forward path: window 8 < N is not the stock model."""
    model = hf_model.load_pretrained(str(folders["llama"]))
    ids, _ = _batch()
    stock = _logits(model, ids)
    model.set_attn_implementation(hf_adapter.register_with_transformers("sliding_window", window=8))
    assert not torch.allclose(_logits(model, ids), stock, atol=1e-3)


def test_a_scaling_other_than_one_over_sqrt_d_is_honoured(folders):
    model = hf_model.load_pretrained(str(folders["llama"]))
    for module in hf_layers.attention_modules(model).values():
        module.scaling = 0.05  # not 1/sqrt(16): q is pre-scaled by scaling * sqrt(D)
    ids, _ = _batch()
    stock = _logits(model, ids)
    model.set_attn_implementation(hf_adapter.register_with_transformers("dense", backend="reference"))
    assert torch.allclose(_logits(model, ids), stock, atol=2e-5)


def test_gqa_is_passed_through_without_repeating_kv(folders):
    model = hf_model.load_pretrained(str(folders["qwen2"]))
    ids, _ = _batch()
    q, k, v = hf_model.capture_qkv(model, lambda: _logits(model, ids), layers=[1])[0]
    assert q.shape == (2, 4, N, 16) and k.shape == v.shape == (2, 1, N, 16)
    assert not model.config._attn_implementation.startswith(hf_adapter.PREFIX)  # capture leaves the model as it was


class NoCausal(AttentionVariant):
    capabilities = Capabilities(causal=False)

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return v.mean(dim=2, keepdim=True).expand_as(q)


def _refused(model, ids, **kwargs) -> str:
    with pytest.raises(NotSupportedError) as info, torch.no_grad():
        model(input_ids=ids, **kwargs)
    return str(info.value)


def test_refusals_name_the_model_feature(tmp_path, folders):
    ids, _ = _batch()
    name = hf_adapter.register_with_transformers("dense")
    gemma = hf_model.load_pretrained(str(save_tiny(tmp_path / "g", "gemma2", attn_logit_softcapping=30.0)))
    gemma.set_attn_implementation(hf_adapter.register_with_transformers("window_linear"))  # no Capabilities.softcap
    assert "does not support logit softcapping (softcap=30.0)" in _refused(gemma, ids, use_cache=False)
    mistral = hf_model.load_pretrained(str(save_tiny(tmp_path / "m", "mistral", sliding_window=16)))
    mistral.set_attn_implementation(hf_adapter.register_with_transformers("distilled"))
    message = _refused(mistral, ids, use_cache=False)
    assert "sliding-window layer (sliding_window=16 < 48 keys): distilled cannot restrict itself to it" in message
    dropping = hf_model.load_pretrained(str(save_tiny(tmp_path / "d", "llama", attention_dropout=0.1)))
    dropping.set_attn_implementation(name)
    dropping.train()
    assert "attention dropout while training (dropout=0.1)" in _refused(dropping, ids, use_cache=False)
    llama = hf_model.load_pretrained(str(folders["llama"]))
    llama.set_attn_implementation(hf_adapter.register_with_transformers(NoCausal()))
    assert "does not support causal=True" in _refused(llama, ids, use_cache=False)


@pytest.mark.parametrize("name", [n for n in list_variants() if not get_variant(n).cls.capabilities.causal])
def test_a_variant_that_cannot_be_causal_is_refused_in_a_causal_lm(folders, name):
    model = hf_model.load_pretrained(str(folders["llama"]))
    hf_model.swap_layers(model, lambda i: build_variant(name, **_exact_config(name, N)))
    ids, _ = _batch()
    assert "does not support causal=True" in _refused(model, ids, use_cache=False)


def test_same_config_same_name_and_bad_arguments():
    assert hf_adapter.register_with_transformers("sliding_window", window=32) == (
        hf_adapter.register_with_transformers("sliding_window", window=32)
    )
    assert hf_adapter.register_with_transformers("sliding_window", window=32) != (
        hf_adapter.register_with_transformers("sliding_window", window=64)
    )
    with pytest.raises(TypeError, match=r"go with a variant name"):
        hf_adapter.register_with_transformers(build_variant("dense"), backend="sdpa")
    with pytest.raises(ValueError, match=r"Unknown variant"):
        hf_adapter.register_with_transformers("slidng_window")
