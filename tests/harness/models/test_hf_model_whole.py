"""Only a whole model is evaluated: missing, unexpected or unreadable weights are refused in one line (exit 2) naming
the folder; a model whose tied weights are not stored still loads."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file, save_file

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


def _eval_line(folder, capsys) -> str:
    capsys.readouterr()  # what saving the model printed
    argv = ["model-eval", "--model", str(folder), "--seq-lens", "64", "--variants", "dense", "--texts", "1"]
    assert main([*argv, "--calibration-texts", "0", "--generate-tokens", "0", "--out", str(folder / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_missing_weights_are_refused(tmp_path, capsys):
    folder = save_tiny(tmp_path / "llama", "llama")
    _rewrite(folder, lambda t: {k: v for k, v in t.items() if ".layers.1." not in k})
    with pytest.raises(UsageError, match=r"is not whole: 9 weights missing .*model\.layers\.1\..*complete checkpoint"):
        hf_model.load_pretrained(str(folder))
    line = _eval_line(folder, capsys)
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
    assert str(folder) in _eval_line(folder, capsys)


def test_whole_model_loads(tmp_path):
    folder = save_tiny(tmp_path / "llama", "llama")
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert not hf_model.load_pretrained(str(folder)).training
