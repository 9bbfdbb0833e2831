"""generate() with a KV cache through the transformers adapter: each step is the contract's causal query offset (the
new queries are the last N of the M cached positions), on a tiny Llama built from a config (2 layers, 4 heads, 2 K/V
heads; nothing downloaded). Exact variants give stock SDPA's greedy tokens; every variant that declares the offset
gives with the cache what it gives recomputing the whole sequence; one that does not is refused, naming the feature."""

from __future__ import annotations

import pytest
import torch

from harness.models import hf_adapter
from tests.helpers.tiny_hf import VOCAB, tiny_config
from variants import AttentionVariant, Capabilities, NotSupportedError, build_variant, get_variant, list_variants

pytestmark = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)
PROMPT, NEW = 12, 8  # prompt tokens, generated tokens
OFFSET_CAPABLE = [
    name
    for name in list_variants()
    if get_variant(name).cls.capabilities.causal and get_variant(name).cls.capabilities.causal_offset
]
# exact at this length: a window covering prompt and generated tokens is full attention
EXACT = {"dense": {}, "chunked": {"query_chunk": 4, "key_chunk": 8}, "sliding_window": {"window": PROMPT + NEW}}


@pytest.fixture(scope="module")
def llama():
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("llama"), attn_implementation="sdpa")
    return model.eval()


def _prompt() -> tuple[torch.Tensor, torch.Tensor]:
    """Two prompts, the second left-padded by 3 tokens (decoders generate from the right edge)."""
    ids = torch.randint(0, VOCAB, (2, PROMPT), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    return ids, mask


def _generate(model, implementation: str, *, use_cache: bool = True):
    ids, mask = _prompt()
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        return model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            do_sample=False,
            use_cache=use_cache,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=0,
        )


@pytest.mark.parametrize("name", EXACT)
def test_exact_variants_generate_sdpas_greedy_tokens_with_a_kv_cache(llama, name):
    stock = _generate(llama, "sdpa")
    ours = _generate(llama, hf_adapter.register_with_transformers(name, **EXACT[name]))
    assert ours.sequences.shape == (2, PROMPT + NEW)
    assert torch.equal(ours.sequences, stock.sequences)
    for step, (mine, theirs) in enumerate(zip(ours.logits, stock.logits)):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=2e-5, msg=f"logits of step {step}")


@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize("kind", ["qwen2", "mistral", "gemma2"])  # MQA and q/k/v biases; a wide window; scaling 1/8
def test_exact_variants_generate_the_stock_tokens_on_the_other_tiny_families(kind, name):
    """Against each model's own eager attention (Gemma2 has no SDPA path in transformers)."""
    import transformers

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(kind), attn_implementation="eager").eval()
    stock = _generate(model, "eager")
    ours = _generate(model, hf_adapter.register_with_transformers(name, **EXACT[name]))
    assert torch.equal(ours.sequences, stock.sequences)
    for step, (mine, theirs) in enumerate(zip(ours.logits, stock.logits)):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=2e-5, msg=f"logits of step {step}")


@pytest.mark.parametrize("name", OFFSET_CAPABLE)
def test_every_offset_capable_variant_generates_with_the_cache_what_it_gives_without(llama, name):
    """The cache changes where a query sits, never what it sees: with it, each step runs N = 1 query over the cached
    keys; without it, the whole sequence again (N == M). Same logits, float32 tolerance."""
    torch.manual_seed(0)
    implementation = hf_adapter.register_with_transformers(build_variant(name, **get_variant(name).cls.small_config))
    cached = _generate(llama, implementation)
    recomputed = _generate(llama, implementation, use_cache=False)
    assert cached.sequences.shape == (2, PROMPT + NEW)
    for step, (mine, again) in enumerate(zip(cached.logits, recomputed.logits)):
        torch.testing.assert_close(mine, again, rtol=1e-4, atol=1e-4, msg=f"logits of step {step}")


class TopLeftCausal(AttentionVariant):
    """A plugin that never heard of the offset: Capabilities.causal_offset stays False."""

    capabilities = Capabilities(exact=True, gqa=True)

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def test_a_variant_without_the_offset_is_refused_naming_the_feature(llama):
    implementation = hf_adapter.register_with_transformers(TopLeftCausal())
    with pytest.raises(NotSupportedError, match=r"causal=True with a query offset \(1 queries over 13 keys.*KV cache"):
        _generate(llama, implementation)
    assert _generate(llama, implementation, use_cache=False).sequences.shape == (2, PROMPT + NEW)  # N == M still runs


def test_a_static_cache_is_refused_naming_it(llama):
    """A static cache hands over all its preallocated slots: the keys do not end at the last query."""
    ids, mask = _prompt()
    llama.set_attn_implementation(hf_adapter.register_with_transformers("dense"))
    with pytest.raises(NotSupportedError, match=r"do not end at the last of the .* static cache"), torch.no_grad():
        llama.generate(ids, attention_mask=mask, max_new_tokens=2, do_sample=False, cache_implementation="static")
