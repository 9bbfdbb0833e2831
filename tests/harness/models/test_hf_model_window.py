"""The model's own sliding window through the transformers adapter (Mistral; Qwen2's sliding layers beside full ones):
a layer whose `sliding_window` is narrower than its keys runs `variant.windowed(window)`, over transformers'
sliding-window cache as well (keys dropped in front). Tiny models from configs, nothing downloaded."""

from __future__ import annotations

import pytest
import torch

from harness.models import hf_adapter, hf_layers
from tests.helpers.tiny_hf import VOCAB, tiny_config
from variants import NotSupportedError, build_variant, get_variant, list_variants

pytestmark = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)
PROMPT, NEW, WINDOW = 12, 8, 8  # the window is narrower than the prompt: the cache drops keys while generating
FAMILIES = {
    "mistral": dict(sliding_window=WINDOW),  # every layer sliding
    "qwen2": dict(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1),  # layer 0 full, 1 sliding
}
HONOURED = {
    "dense": {},
    "sliding_window": {"window": 4 * WINDOW},
    "chunked": {"query_chunk": 8, "key_chunk": 8},
}  # sliding_window: the narrower band, the model's


def _model(kind: str):
    import transformers

    config = tiny_config(kind, **FAMILIES[kind])
    if kind == "qwen2":  # layer types are derived when the config is built
        config = type(config)(**{**config.to_dict(), "layer_types": None})
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


def _generate(model, implementation: str):
    ids = torch.randint(0, VOCAB, (2, PROMPT), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0  # left padding
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        return model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=0,
        )


@pytest.mark.parametrize("kind", FAMILIES)
@pytest.mark.parametrize("name", HONOURED)
def test_a_variant_that_honours_the_window_generates_the_stock_tokens(kind, name):
    model = _model(kind)
    assert "sliding_attention" in getattr(model.config, "layer_types", ["sliding_attention"])  # Mistral: every layer
    stock = _generate(model, "eager")
    ours = _generate(model, hf_adapter.register_with_transformers(name, **HONOURED[name]))
    assert torch.equal(ours.sequences, stock.sequences)
    for step, (mine, theirs) in enumerate(zip(ours.logits, stock.logits)):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=2e-5, msg=f"logits of step {step}")


def test_the_window_changes_what_a_full_attention_variant_would_give():
    """The stock model really is windowed here: the same model with its window removed generates other logits."""
    windowed, full = _model("mistral"), _model("mistral")
    full.config.sliding_window = None
    for module in hf_layers.attention_modules(full).values():
        module.config.sliding_window = None
    name = hf_adapter.register_with_transformers("dense")
    assert not torch.allclose(_generate(windowed, name).logits[-1], _generate(full, name).logits[-1], atol=1e-4)


@pytest.mark.parametrize("name", [n for n in list_variants() if build_variant(n).windowed(WINDOW) is None])
def test_a_variant_that_cannot_honour_the_window_is_refused_naming_it(name):
    model = _model("mistral")
    variant = build_variant(name, **get_variant(name).cls.small_config)
    with pytest.raises(NotSupportedError, match=rf"sliding-window layer \(sliding_window={WINDOW} < \d+ keys\)"):
        _generate(model, hf_adapter.register_with_transformers(variant))
