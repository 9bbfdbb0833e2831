"""Swap or refuse, never pretend (issue 40): a variant runs in every layer of the model, whatever its projections are
called (GPT-NeoX, Phi-3, GPT-2), or the model is refused naming its class (an ALiBi model, a layer that bypasses the
adapter); layer indices are the model's; a keyword argument the adapter does not know is refused, naming it."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from harness import inputs
from harness.commands import main
from harness.inputs import model as model_inputs
from harness.models import hf_adapter, hf_layers, hf_model
from harness.studies import lm_eval
from tests.helpers.tiny_hf import VOCAB, save_tiny
from variants import NotSupportedError, build_variant

pytestmark = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)

OTHERS = ("gpt_neox", "phi3", "gpt2", "persimmon", "jetmoe")  # none has a q_proj or query projection
TEXT = "Attention is all you need, said the paper; the benchmark checks it. " * 40


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {kind: save_tiny(tmp_path_factory.mktemp(kind), kind) for kind in (*OTHERS, "bloom", "llama")}


def _logits(model, ids, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False, **kwargs).logits  # (1, N, vocab)


def _ids(N: int = 16) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, N), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("kind", OTHERS)
def test_models_with_other_projection_names_run_the_variant_in_every_layer(folders, kind):
    model = hf_model.load_pretrained(str(folders[kind]))
    ids = _ids()
    own = _logits(model, ids)
    with hf_model.swapped(model, lambda i: build_variant("dense")):
        dense = _logits(model, ids)
    with hf_model.swapped(model, lambda i: build_variant("sliding_window", window=4)):
        windowed = _logits(model, ids)
    assert sorted(hf_layers.attention_modules(model)) == [0, 1]
    torch.testing.assert_close(dense, own, atol=1e-5, rtol=0)
    # a window of 4 keys covers every key of the first 4 positions, and cuts all later ones
    torch.testing.assert_close(windowed[:, :4], own[:, :4], atol=1e-5, rtol=0)
    assert (windowed[:, 4:] - own[:, 4:]).abs().amax(-1).min() > 1e-4
    assert model.config._attn_implementation == "sdpa"  # its own attention after the block


def test_gpt2_is_a_causal_lm_and_bert_is_not(folders):
    import transformers

    assert hf_model.is_causal_lm(hf_model.load_config(str(folders["gpt2"])))  # GPT2LMHeadModel
    assert not hf_model.is_causal_lm(transformers.BertConfig(architectures=["BertModel"]))


def test_an_alibi_model_is_refused_by_name(folders):
    model = hf_model.load_pretrained(str(folders["bloom"]))
    refusal = r"BloomForCausalLM \(bloom\) computes its ALiBi attention itself, never through transformers'"
    with pytest.raises(NotSupportedError, match=refusal):
        with hf_model.swapped(model, lambda i: build_variant("dense")):
            _logits(model, _ids())
    with pytest.raises(NotSupportedError, match=refusal):
        hf_model.capture_qkv(model, lambda: _logits(model, _ids()), layers=[1])


def test_model_eval_of_an_alibi_model_gives_unsupported_rows_never_numbers(folders):
    rows, _ = lm_eval.run_lm_eval(
        str(folders["bloom"]),
        ["dense", "sliding_window", "linformer"],  # linformer is learnable: its calibration capture is refused too
        [128],
        text=TEXT,
        n_eval=1,
        n_calibration=1,
        steps=1,
        generate_tokens=0,
        tokenizer="bytes",
    )
    assert [r["status"] for r in rows] == ["unsupported"] * 3
    assert all("BloomForCausalLM (bloom) computes its ALiBi attention" in r["reason"] for r in rows)
    assert all(r["kl_mean"] is None and r["perplexity"] is None for r in rows)


def test_a_layer_that_bypasses_the_adapter_is_refused_with_the_layers_that_ran(folders):
    model = hf_model.load_pretrained(str(folders["llama"]))
    bypass = hf_layers.attention_modules(model)[1]
    bypass.config = copy.copy(model.config)  # layer 1 keeps transformers' eager attention whatever the model is set to
    bypass.config._attn_implementation = "eager"
    message = r"LlamaForCausalLM: the variant was called in 1 of its 2 layers \(not in layer 1\)"
    with pytest.raises(NotSupportedError, match=message):
        with hf_model.swapped(model, lambda i: build_variant("sliding_window", window=4)):
            _logits(model, _ids())
    assert model.config._attn_implementation == "sdpa"


def test_a_second_attention_module_in_one_layer_is_refused(folders):
    model = hf_model.load_pretrained(str(folders["llama"]))
    hf_layers.attention_modules(model)[1].layer_idx = 0  # two modules claim layer 0, as self- and cross-attention do
    message = r"attention modules outside the model's numbered layers called the adapter \(LlamaAttention"
    with pytest.raises(NotSupportedError, match=message), hf_model.swapped(model, lambda i: build_variant("dense")):
        _logits(model, _ids())


def test_the_model_inputs_layer_is_the_models_layer_index(folders):
    from transformers import AttentionInterface  # the optional [hf] extra: the module skips without it
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    folder = folders["gpt_neox"]
    seen = {}
    entry = f"model:path={folder},layer=1,tokenizer=bytes"
    name, params = inputs.parse_inputs(entry)
    q, k, _ = inputs.make_inputs(name, params, B=1, H=4, N=16, D=16, seed=0)
    stream = model_inputs._stream(str(folder), "", "bytes")
    starts = torch.randint(0, 2**62, (1,), generator=torch.Generator().manual_seed(0)).tolist()
    split = len(stream) * 3 // 4
    ids = torch.tensor([stream[s % (split - 16) : s % (split - 16) + 16] for s in starts])
    net = hf_model.load_pretrained(str(folder))

    def recording(module, query, key, value, attention_mask, **kwargs):  # by the model's own layer_idx
        seen[module.layer_idx] = (query, key)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("swap_count_probe", recording)
    net.set_attn_implementation("swap_count_probe")
    _logits(net, ids)
    torch.testing.assert_close(q, seen[1][0], atol=1e-6, rtol=0)
    torch.testing.assert_close(k, seen[1][1], atol=1e-6, rtol=0)
    assert (seen[0][0] - seen[1][0]).abs().max() > 1e-3  # layer 0's are other tensors


def test_an_unknown_keyword_argument_is_refused_naming_it(folders):
    model = hf_model.load_pretrained(str(folders["llama"]))
    model.set_attn_implementation(hf_adapter.register_with_transformers("dense"))
    selection = torch.zeros(1, 4, 16, 2, dtype=torch.long)
    with pytest.raises(
        NotSupportedError, match=r"the model passes block_indices, which attnsuite's adapter does not map"
    ):
        _logits(model, _ids(), block_indices=selection)  # transformers hands it to the attention function
    # None is no feature: the same model runs
    torch.testing.assert_close(_logits(model, _ids(), block_indices=None), _logits(model, _ids()), atol=0, rtol=0)
    # what transformers passes down from an ordinary call (hidden states for embeddings, the Trainer's token count)
    # changes no attention: allowed, and the logits are the plain call's
    for extra in ({"output_hidden_states": True}, {"output_hidden_states": False}, {"num_items_in_batch": 7}):
        torch.testing.assert_close(_logits(model, _ids(), **extra), _logits(model, _ids()), atol=0, rtol=0)


def test_model_eval_of_gpt2_runs_and_measures_a_window_end_to_end(folders, tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    argv = ["model-eval", "--tokenizer", "bytes", "--model", str(folders["gpt2"]), "--seq-lens", "32", "--texts", "1"]
    argv += ["--variants", "dense,sliding_window", "--set", "sliding_window.window=4", "--calibration-texts", "0"]
    argv += ["--generate-tokens", "2", "--text", str(text), "--out", str(tmp_path / "out")]
    assert main(argv) == 0, capsys.readouterr().err  # GPT2LMHeadModel: once "not a causal LM", exit 2
    rows = {r["variant"]: r for r in json.loads((tmp_path / "out" / "lm_eval.json").read_text())["rows"]}
    assert rows["dense"]["status"] == rows["sliding_window"]["status"] == "ok"
    assert rows["dense"]["kl_mean"] < 1e-9 and rows["dense"]["generation_status"] == "ok"
    assert rows["sliding_window"]["kl_mean"] > 1e-4  # swapped in c_attn's layers: a 4-key window changes the model
