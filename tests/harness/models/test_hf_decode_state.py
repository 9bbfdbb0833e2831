"""The constant-memory decode path inside a model: VariantStateCache keeps each layer's variant decode state (init_state at
the prefill, step per token) instead of keys and values. On a tiny Llama (2 layers, 4 heads, 2 K/V heads; nothing
downloaded), greedy generate() through the state gives the cache path's tokens and logits (float32 tolerance), its
memory stays constant while a KV cache grows, and what it cannot follow is refused naming why."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.models import hf_adapter
from tests.helpers.tiny_hf import VOCAB, tiny_config
from variants import NotSupportedError, build_variant

pytestmark = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)
PROMPT, NEW, W = 12, 16, 6  # prompt tokens, generated tokens, sliding_window's window (the ring wraps)
# the running-sum variants step eagerly here: their compiled step equals the eager one (tests/variants/test_decode_step.py)
STATEFUL = {
    "sliding_window": {"window": W},
    "distilled": {"features": 16, "chunk": 8, "decode_backend": "eager"},
    "window_linear": {"window": 4, "features": 8, "chunk": 8, "decode_backend": "eager"},
}


@pytest.fixture(scope="module")
def llama():
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("llama"), attn_implementation="sdpa")
    return model.eval()


def _generate(model, implementation: str, *, cache=None, new: int = NEW, **options):
    """Greedy generate from two prompts, the second left-padded by 3 tokens; `cache`: a Cache object or None (generate's
    own DynamicCache)."""
    ids = torch.randint(0, VOCAB, (2, PROMPT), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        return model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=new,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=0,
            cache=cache,
            **options,
        )


def _state_cache(model):
    from harness.models.hf_decode_state import VariantStateCache

    return VariantStateCache(model)


@pytest.mark.parametrize("name", STATEFUL)
def test_the_state_path_generates_the_cache_paths_tokens_and_logits(llama, name):
    torch.manual_seed(0)  # distilled's and window_linear's feature maps: one instance serves both paths
    implementation = hf_adapter.register_with_transformers(build_variant(name, **STATEFUL[name]))
    cache = _state_cache(llama)
    stateful = _generate(llama, implementation, cache=cache)
    cached = _generate(llama, implementation)  # after the state path: its binding must not touch a DynamicCache
    assert cache.get_seq_length() == PROMPT + NEW - 1  # the last token is generated, never fed back
    assert stateful.sequences.shape == (2, PROMPT + NEW)
    assert torch.equal(stateful.sequences, cached.sequences)
    for step, (mine, theirs) in enumerate(zip(stateful.logits, cached.logits)):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5, msg=f"logits of step {step}")


@pytest.mark.parametrize("name", STATEFUL)
def test_the_states_bytes_stay_constant_while_the_kv_cache_grows(llama, name):
    torch.manual_seed(0)
    implementation = hf_adapter.register_with_transformers(build_variant(name, **STATEFUL[name]))
    short, long = _state_cache(llama), _state_cache(llama)
    _generate(llama, implementation, cache=short, new=4)
    _generate(llama, implementation, cache=long, new=NEW)
    kv = _generate(llama, implementation).past_key_values
    kv_bytes = sum(layer.keys.nbytes + layer.values.nbytes for layer in kv.layers)
    assert kv_bytes == 2 * 2 * 2 * 2 * (PROMPT + NEW - 1) * 16 * 4  # k and v, 2 layers, B 2, H_kv 2, positions, D 16
    assert short.state_bytes() == long.state_bytes() > 0
    if name == "sliding_window":  # k, v (B, H_kv, W, D) float32, pos (W,) int64, real (B, W) bool, per layer
        assert long.state_bytes() == 2 * (2 * 2 * 2 * W * 16 * 4 + W * 8 + 2 * W)


def test_a_variant_without_a_decode_state_is_refused_naming_it(llama):
    implementation = hf_adapter.register_with_transformers("linformer", k=8)
    with pytest.raises(NotSupportedError, match="linformer cannot decode"):
        _generate(llama, implementation, cache=_state_cache(llama))


def test_beam_search_is_refused_naming_it(llama):
    implementation = hf_adapter.register_with_transformers("sliding_window", window=W)
    with pytest.raises(NotSupportedError, match=r"cannot be reordered.*beam search reorders"):
        _generate(llama, implementation, cache=_state_cache(llama), num_beams=2)


def test_gradients_are_refused_the_state_is_updated_in_place(llama):
    ids = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    llama.set_attn_implementation(hf_adapter.register_with_transformers("sliding_window", window=W))
    with pytest.raises(NotSupportedError, match=r"under torch.no_grad\(\)"):
        llama(ids, cache=_state_cache(llama), use_cache=True)


def test_the_models_softcap_is_refused_in_the_state_path():
    """Gemma 2's logit softcapping: dense honours it over the KV cache, but step() takes no softcap."""
    import transformers

    torch.manual_seed(0)
    config = tiny_config("gemma2", attn_logit_softcapping=50.0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    implementation = hf_adapter.register_with_transformers("dense")
    assert _generate(model, implementation, new=2).sequences.shape == (2, PROMPT + 2)  # the cache path runs it
    with pytest.raises(NotSupportedError, match="the model's softcap in the state path"):
        _generate(model, implementation, cache=_state_cache(model), new=2)


@pytest.mark.parametrize("name", ["dense", "sliding_window"])
def test_the_models_own_narrower_window_runs_as_a_ring_of_that_window(name):
    """Mistral's sliding_window=8 under 12-token prompts: the state path runs variant.windowed(8) from the first token
    (a ring of 8 keys) and gives the cache path's tokens and logits, where transformers' sliding-window cache drops
    keys; distilled, which cannot restrict itself to the window, is refused naming it."""
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("mistral", sliding_window=8)).eval()
    implementation = hf_adapter.register_with_transformers(name, **({"window": 16} if name == "sliding_window" else {}))
    cache = _state_cache(model)
    stateful = _generate(model, implementation, cache=cache)
    cached = _generate(model, implementation)
    assert torch.equal(stateful.sequences, cached.sequences)
    for step, (mine, theirs) in enumerate(zip(stateful.logits, cached.logits)):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5, msg=f"logits of step {step}")
    assert cache.state_bytes() == 2 * (2 * 2 * 2 * 8 * 16 * 4 + 8 * 8 + 2 * 8)  # a ring of 8 per layer (see above)
    with pytest.raises(NotSupportedError, match=r"sliding_window=8 < the keys a decode state sees\): distilled"):
        _generate(model, hf_adapter.register_with_transformers("distilled", features=16), cache=_state_cache(model))


def test_padding_among_the_decoded_tokens_is_refused(llama):
    ids = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(2))
    llama.set_attn_implementation(hf_adapter.register_with_transformers("sliding_window", window=W))
    cache = _state_cache(llama)
    with torch.no_grad():
        llama(ids, cache=cache, use_cache=True)  # the prompt: init_state
        padded = torch.cat([torch.ones_like(ids), torch.zeros(1, 1, dtype=ids.dtype)], dim=1)  # the new token padded
        with pytest.raises(NotSupportedError, match="padding among the decoded tokens"):
            llama(ids[:, :1], attention_mask=padded, cache=cache, use_cache=True)


def test_a_step_by_another_variant_than_the_prefills_is_refused(llama):
    ids = torch.randint(0, VOCAB, (1, PROMPT), generator=torch.Generator().manual_seed(3))
    cache = _state_cache(llama)
    with torch.no_grad():
        llama.set_attn_implementation(hf_adapter.register_with_transformers("sliding_window", window=W))
        llama(ids, cache=cache, use_cache=True)
        llama.set_attn_implementation(hf_adapter.register_with_transformers("distilled", features=16))
        with pytest.raises(NotSupportedError, match=r"a step by distilled after sliding_window's prefill"):
            llama(ids[:, :1], cache=cache, use_cache=True)


def test_a_bidirectional_layer_is_refused_in_the_state_path():
    import transformers

    from harness.models.hf_layers import attention_modules

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("llama")).eval()
    for module in attention_modules(model).values():
        module.is_causal = False  # an encoder's layer: every token sees every other
    model.set_attn_implementation(hf_adapter.register_with_transformers("sliding_window", window=W))
    with pytest.raises(NotSupportedError, match=r"decodes causally; this layer is bidirectional"), torch.no_grad():
        model(torch.zeros(1, 4, dtype=torch.long), cache=_state_cache(model), use_cache=True)


def test_a_variant_without_gqa_gets_repeated_keys_through_the_state(llama):
    """A plugin declaring gqa=False is handed K/V repeated to H heads: the state path must still take the keys its
    cache handed out (before the repeat) for its own, and give the cache path's tokens and logits."""
    from variants.dense import DenseAttention

    class NoGQADense(DenseAttention):
        capabilities = dataclasses.replace(DenseAttention.capabilities, gqa=False)

    implementation = hf_adapter.register_with_transformers(NoGQADense())
    stateful = _generate(llama, implementation, cache=_state_cache(llama))
    stock = _generate(llama, "sdpa")
    assert torch.equal(stateful.sequences, stock.sequences)
    for step, (mine, theirs) in enumerate(zip(stateful.logits, stock.logits)):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=2e-5, msg=f"logits of step {step}")
