"""Only a whole model is evaluated: missing, unexpected or unreadable weights are refused in one line (exit 2) naming
the folder; a model whose tied weights are not stored still loads."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file, save_file

from harness import inputs
from harness.commands import main
from harness.errors import UsageError
from harness.models import hf_adapter, hf_model
from tests.helpers.tiny_hf import save_tiny

pytestmark = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)
WEIGHTS = "model.safetensors"


def _rewrite(folder, change) -> None:
    """The folder's weights with `change(tensors) -> tensors` applied, saved back with their metadata."""
    tensors = load_file(str(folder / WEIGHTS))
    save_file(change(dict(tensors)), str(folder / WEIGHTS), metadata={"format": "pt"})


def _eval_line(folder, capsys, *flags: str) -> str:
    """The one line model-eval exits 2 with on the model at `folder` (`flags`: e.g. --tokenizer bytes)."""
    capsys.readouterr()  # what saving the model printed
    argv = ["model-eval", *flags, "--model", str(folder), "--seq-lens", "64", "--variants", "dense", "--texts", "1"]
    assert main([*argv, "--calibration-texts", "0", "--generate-tokens", "0", "--out", str(folder / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_missing_weights_are_refused(tmp_path, capsys):
    folder = save_tiny(tmp_path / "llama", "llama")
    _rewrite(folder, lambda t: {k: v for k, v in t.items() if ".layers.1." not in k})
    with pytest.raises(UsageError, match=r"is not whole: 9 weights missing .*model\.layers\.1\..*complete checkpoint"):
        hf_model.load_pretrained(str(folder))
    line = _eval_line(folder, capsys, "--tokenizer", "bytes")
    assert "is not whole: 9 weights missing" in line and str(folder) in line


def test_renamed_weights_are_refused_as_missing_and_unexpected(tmp_path):
    folder = save_tiny(tmp_path / "llama", "llama")
    _rewrite(folder, lambda t: {k.replace("model.", "body.", 1): v for k, v in t.items()})
    with pytest.raises(UsageError, match=r"'.*llama' is not whole: \d+ weights missing"):
        hf_model.load_pretrained(str(folder))


def test_extra_weights_are_refused_as_unexpected(tmp_path):
    folder = save_tiny(tmp_path / "llama", "llama")
    _rewrite(folder, lambda t: {**t, "model.extra.weight": t["model.norm.weight"].clone()})
    with pytest.raises(UsageError, match=r"1 weights unexpected .*: model\.extra\.weight; pass a complete"):
        hf_model.load_pretrained(str(folder))


def test_tied_embeddings_load(tmp_path):
    folder = save_tiny(tmp_path / "llama", "llama", tie_word_embeddings=True)
    assert "lm_head.weight" not in load_file(str(folder / WEIGHTS))  # tied: transformers stores it once
    model = hf_model.load_pretrained(str(folder))
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "no_config"])
def test_unreadable_weights_are_one_line(tmp_path, capsys, damage):
    folder = save_tiny(tmp_path / "llama", "llama")
    weights = folder / WEIGHTS
    if damage == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "garbage":
        weights.write_bytes(b"\x07not a safetensors file" * 100)
    else:
        (folder / "config.json").unlink()
    with pytest.raises(ValueError, match=r"transformers cannot load the model '.*llama': \S"):
        hf_model.load_pretrained(str(folder))
    assert str(folder) in _eval_line(folder, capsys, "--tokenizer", "bytes")


def test_whole_model_loads(tmp_path):
    folder = save_tiny(tmp_path / "llama", "llama")
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert not hf_model.load_pretrained(str(folder)).training


def test_a_broken_tokenizer_is_an_error_unless_bytes_are_asked_for(tmp_path, capsys):
    folder = save_tiny(tmp_path / "llama", "llama")
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "nothing"}}')
    (folder / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
    with pytest.raises(ValueError, match=r"the tokenizer in '.*llama' does not load: \S.*--tokenizer bytes"):
        hf_model.token_ids(str(folder), "some text", 128)
    line = _eval_line(folder, capsys)
    assert "the tokenizer in" in line and str(folder) in line and "--tokenizer bytes" in line
    assert hf_model.token_ids(str(folder), "ab", 128, tokenizer="bytes") == ([97, 98], "bytes")


def test_a_folder_without_a_tokenizer_needs_bytes_and_the_results_say_so(tmp_path, capsys):
    folder = save_tiny(tmp_path / "llama", "llama")
    assert "does not load" in _eval_line(folder, capsys)
    argv = ["model-eval", "--tokenizer", "bytes", "--model", str(folder), "--seq-lens", "64", "--variants", "dense"]
    out = tmp_path / "out"
    argv += ["--texts", "1", "--calibration-texts", "0", "--generate-tokens", "0", "--out", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    (meta_file,) = out.glob("*.json")
    written = json.loads(meta_file.read_text())
    assert written["meta"]["tokenizer"] == "bytes", written.keys()
    assert {row["tokenizer"] for row in written["rows"]} == {"bytes"}


def test_the_model_input_needs_its_tokenizer_or_bytes(tmp_path):
    folder = save_tiny(tmp_path / "llama", "llama")
    shape = dict(B=1, H=4, N=32, D=16, seed=0, H_kv=2)
    with pytest.raises(ValueError, match=r"the tokenizer in '.*llama' does not load: .*model:tokenizer=bytes"):
        inputs.make_inputs("model", {"path": str(folder)}, **shape)
    with pytest.raises(ValueError, match=r"tokenizer='utf8': expected one of model, bytes"):
        inputs.make_inputs("model", {"path": str(folder), "tokenizer": "utf8"}, **shape)
    q, _, _ = inputs.make_inputs("model", {"path": str(folder), "tokenizer": "bytes"}, **shape)
    assert q.shape == (1, 4, 32, 16)


def test_tokenizer_bytes_without_a_model_is_refused(capsys):
    assert main(["model-eval", "--tokenizer", "bytes"]) == 2
    assert "--tokenizer bytes is for --model" in capsys.readouterr().err


def test_a_tokenizer_that_gives_no_tokens_is_an_error_naming_the_fix(tmp_path):
    """A Qwen2 folder without tokenizer files: transformers builds an empty tokenizer that maps any text to no tokens;
    taken as it is, every window would be empty. An error naming the folder and the bytes fix instead."""
    folder = save_tiny(tmp_path / "qwen2", "qwen2")
    with pytest.raises(ValueError, match=r"the tokenizer in '.*qwen2' gives no tokens for the text .*tokenizer bytes"):
        hf_model.token_ids(str(folder), "hello world", 100)
    assert hf_model.token_ids(str(folder), "hi", 100, tokenizer="bytes") == ([104 % 100, 105 % 100], "bytes")
