"""The model's own attention features through the transformers adapter, on tiny models built from configs (2 layers,
hidden 64; nothing downloaded): Gemma 2's logit softcapping (`softcap`) and gpt-oss's learned sink logits (`s_aux`).

A variant declaring the capability equals the model's own eager attention (logits on a padded batch, float32
tolerance; greedy generate() tokens); one that does not is refused naming the feature."""

from __future__ import annotations

import re

import pytest
import torch

from harness.models import hf_adapter, hf_layers
from tests.harness.models.test_hf_generate import NEW, PROMPT, _generate, _prompt
from tests.helpers.tiny_hf import tiny_config
from variants import NotSupportedError

pytestmark = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)
SOFTCAP = 5.0  # Gemma 2 ships 50; the tiny model's scores are scaled up (SCORE_GAIN) so that 5 bites
SCORE_GAIN = 15.0  # q_proj and k_proj scaled by this: scores of ~ +-10 instead of ~ +-0.05
EXACT = {"dense": {}, "chunked": {"query_chunk": 4, "key_chunk": 8}, "sliding_window": {"window": PROMPT + NEW}}
HONOURS = {"gemma2": ("dense", "chunked", "sliding_window"), "gpt_oss": ("dense", "chunked", "sliding_window")}


def _has_config(kind: str) -> str | None:
    """Why this transformers lacks the family (None when it has it)."""
    import transformers

    name = {"gemma2": "Gemma2Config", "gpt_oss": "GptOssConfig"}[kind]
    return None if hasattr(transformers, name) else f"transformers {transformers.__version__} has no {name}"


def _model(kind: str):
    """The tiny model in eager mode with its feature made to matter: softcap 5 on scaled-up scores (gemma2), sink
    logits of the size of a row's log-sum-exp (gpt_oss)."""
    import transformers

    reason = _has_config(kind)
    if reason:
        pytest.skip(reason)
    overrides = {"attn_logit_softcapping": SOFTCAP} if kind == "gemma2" else {}
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(kind, **overrides), attn_implementation="eager")
    with torch.no_grad():
        for module in hf_layers.attention_modules(model).values():
            if kind == "gemma2":
                module.q_proj.weight.mul_(SCORE_GAIN)
                module.k_proj.weight.mul_(SCORE_GAIN)
            else:
                module.sinks.copy_(torch.randn(module.sinks.shape) * 2 + 1)
    return model.eval()


def _logits(model, implementation: str) -> torch.Tensor:
    ids, mask = _prompt()
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, use_cache=False).logits  # (B, N, vocab)


def _without_the_feature(model, kind: str) -> None:
    for module in hf_layers.attention_modules(model).values():
        if kind == "gemma2":
            module.attn_logit_softcapping = None
        else:
            module.sinks.data.fill_(-1e4)  # exp(-1e4) = 0: no share of any row


@pytest.mark.parametrize("kind", HONOURS)
def test_the_feature_changes_the_tiny_models_output(kind):
    """Else the equality checks below could not fail."""
    model = _model(kind)
    with_it = _logits(model, "eager")
    _without_the_feature(model, kind)
    assert (with_it - _logits(model, "eager")).abs().max() > 1e-2


@pytest.mark.parametrize("kind,name", [(kind, name) for kind, names in HONOURS.items() for name in names])
def test_variants_that_honour_the_feature_equal_eager_logits_and_greedy_tokens(kind, name):
    model = _model(kind)
    implementation = hf_adapter.register_with_transformers(name, **EXACT[name])
    _, mask = _prompt()
    real = mask.bool()[..., None].expand(-1, -1, model.config.vocab_size)  # padded query rows are unspecified
    ours, stock = _logits(model, implementation), _logits(model, "eager")
    torch.testing.assert_close(ours[real], stock[real], rtol=1e-5, atol=2e-5)
    generated, reference = _generate(model, implementation), _generate(model, "eager")
    assert generated.sequences.shape == (2, PROMPT + NEW)
    assert torch.equal(generated.sequences, reference.sequences)
    for step, (mine, theirs) in enumerate(zip(generated.logits, reference.logits)):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=2e-5, msg=f"logits of step {step}")


@pytest.mark.parametrize(
    "kind,name,feature",
    [("gemma2", "window_linear", "logit softcapping (softcap=5.0)"), ("gpt_oss", "distilled", "learned sink logits")],
)
def test_a_variant_without_the_capability_is_refused_naming_the_feature(kind, name, feature):
    model = _model(kind)
    ids, mask = _prompt()
    model.set_attn_implementation(hf_adapter.register_with_transformers(name))
    with pytest.raises(
        NotSupportedError, match=rf"{name} cannot run this call: .*does not support {re.escape(feature)}"
    ):
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask, use_cache=False)
