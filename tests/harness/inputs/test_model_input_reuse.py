"""The `model` inputs' run-folder cache by count: a capture (the model run, counted by a spy on hf_model.capture_qkv) is
reused only when every part of its key is the call's (the model's files, the text's content, the layer, N, the window
starts, the tokenizer), and a file under the right key but of another batch size or dtype is captured again."""

from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import save_file

from harness.inputs import model as model_inputs
from harness.models import hf_adapter, hf_model
from tests.helpers.tiny_hf import VOCAB, save_tiny

pytestmark = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)
N, STARTS = 16, [3, 40]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("llama"), "llama")


@pytest.fixture
def captures(monkeypatch):
    """The model runs made (one per capture), and a token stream per tokenizer that needs no tokenizer files."""
    runs = []
    real = hf_model.capture_qkv
    monkeypatch.setattr(hf_model, "capture_qkv", lambda *a, **kw: runs.append(1) or real(*a, **kw))
    streams = {"bytes": tuple(i % VOCAB for i in range(400)), "model": tuple((7 * i + 1) % VOCAB for i in range(400))}
    monkeypatch.setattr(model_inputs, "_stream", lambda path, text, tokenizer: streams[tokenizer])
    return runs


def capture(folder, llama, *, layer=0, text="", n=N, starts=STARTS, tokenizer="bytes"):
    with model_inputs.run_folder(folder):
        return model_inputs.captured(str(llama), layer, text, n, starts, tokenizer=tokenizer)


def test_the_same_key_reuses_the_capture_and_each_changed_part_captures_again(llama, tmp_path, captures):
    text = tmp_path / "text.txt"
    text.write_text("a text " * 100)
    first = capture(tmp_path, llama, text=str(text))
    assert len(captures) == 1
    again = capture(tmp_path, llama, text=str(text))
    assert len(captures) == 1 and all(torch.equal(a, b) for a, b in zip(first, again))
    changes = [
        dict(layer=1),
        dict(n=N // 2),
        dict(starts=[3, 41]),  # one window moved
        dict(starts=[40, 3]),  # the same windows, the batch rows swapped
        dict(tokenizer="model"),
    ]
    for count, change in enumerate(changes, start=2):
        capture(tmp_path, llama, **{"text": str(text), **change})
        assert len(captures) == count, change
    capture(tmp_path, llama, text=str(text))  # each changed key has its own file: the first is still there
    assert len(captures) == len(changes) + 1
    text.write_text("another " * 100)  # the same path, another content
    capture(tmp_path, llama, text=str(text))
    assert len(captures) == len(changes) + 2
    weights = next(llama.glob("*.safetensors"))
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the model's weights rewritten
    capture(tmp_path, llama, text=str(text))
    assert len(captures) == len(changes) + 3
    assert len(list((tmp_path / model_inputs.CACHE_FOLDER).glob("*.safetensors"))) == len(changes) + 3


def test_without_a_run_folder_nothing_is_cached(llama, tmp_path, captures, monkeypatch):
    monkeypatch.delenv(model_inputs.RUN_DIR_ENV, raising=False)
    for _ in range(2):
        model_inputs.captured(str(llama), 0, "", N, STARTS, tokenizer="bytes")
    assert len(captures) == 2


def _file(folder):
    (file,) = (folder / model_inputs.CACHE_FOLDER).glob("*.safetensors")
    return file


def _key(llama):
    return model_inputs.capture_key(str(llama), 0, "", N, STARTS) + " tokenizer=bytes"


@pytest.mark.parametrize(
    "plant",
    [
        lambda t: t[:1],  # one batch row of the two
        lambda t: t.half(),  # float16
        lambda t: t[..., :4],  # another head_dim in every tensor
        lambda t: t[:, :1],  # one head in q and in k, v (still a valid GQA grouping)
    ],
    ids=["batch", "dtype", "head-dim", "heads"],
)
def test_a_file_under_the_right_key_of_another_shape_or_dtype_is_captured_again(llama, tmp_path, captures, plant):
    first = capture(tmp_path, llama)
    file = _file(tmp_path)
    save_file({name: plant(t).contiguous() for name, t in zip("qkv", first)}, str(file), metadata={"key": _key(llama)})
    again = capture(tmp_path, llama)
    assert len(captures) == 2 and all(torch.equal(a, b) for a, b in zip(first, again))
    assert capture(tmp_path, llama)[0].shape == first[0].shape and len(captures) == 2  # the real one written back


def test_a_file_under_the_right_key_with_the_right_shape_is_trusted(llama, tmp_path, captures):
    # the cache is the key's answer: a file with this key and shape is loaded as it is (no model run)
    first = capture(tmp_path, llama)
    planted = {name: torch.full_like(t, 0.5) for name, t in zip("qkv", first)}
    save_file(planted, str(_file(tmp_path)), metadata={"key": _key(llama)})
    assert all(torch.equal(t, torch.full_like(t, 0.5)) for t in capture(tmp_path, llama)) and len(captures) == 1
