"""The `model` inputs' run-folder cache trusts a file only when it is this capture's (model, text, layer, N, starts,
shape, dtype), and a user's text file is read within bounds (harness.text_files)."""

from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness import inputs
from harness.errors import UsageError
from harness.inputs import model as model_inputs
from harness.inputs import registry
from harness.models import hf_adapter
from harness.text_files import read_user_text
from tests.helpers.tiny_hf import save_tiny

needs_hf = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)
SHAPE = dict(B=2, H=4, N=32, D=16, H_kv=2)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("llama"), "llama")


def _capture(llama, folder, **params):
    with model_inputs.run_folder(folder):
        return inputs.make_inputs("model", {"path": str(llama), "tokenizer": "bytes", **params}, seed=5, **SHAPE)


def _only_file(folder):
    (file,) = (folder / model_inputs.CACHE_FOLDER).glob("*.safetensors")
    return file


@needs_hf
def test_a_planted_file_of_another_shape_is_captured_again_not_trusted(llama, tmp_path):
    fresh = _capture(llama, tmp_path / "a")
    file = _only_file(tmp_path / "a")
    wrong = {name: torch.zeros(2, t.shape[1], 8, 16) for name, t in zip("qkv", fresh)}  # N=8, not 32
    key = model_inputs.capture_key(str(llama), 0, "", 32, _starts()) + " tokenizer=bytes"  # the capture's own key
    save_file(wrong, str(file), metadata={"key": key})
    again = _capture(llama, tmp_path / "a")
    assert all(torch.equal(a, b) for a, b in zip(fresh, again))
    assert load_file(str(file))["q"].shape[2] == 32  # the planted file was replaced by the real capture


@needs_hf
def test_a_file_recording_another_key_or_garbage_is_captured_again(llama, tmp_path):
    fresh = _capture(llama, tmp_path / "b")
    file = _only_file(tmp_path / "b")
    save_file({name: t * 0 for name, t in zip("qkv", fresh)}, str(file), metadata={"key": "another capture"})
    assert all(torch.equal(a, b) for a, b in zip(fresh, _capture(llama, tmp_path / "b")))
    file.write_bytes(b"not a safetensors file")
    assert all(torch.equal(a, b) for a, b in zip(fresh, _capture(llama, tmp_path / "b")))


@needs_hf
def test_the_key_follows_the_models_weights_and_the_texts_content(llama, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("one text " * 400)
    before = model_inputs.capture_key(str(llama), 0, str(text), 32, [1, 2])
    text.write_text("another text " * 400)  # same path, other content
    after_text = model_inputs.capture_key(str(llama), 0, str(text), 32, [1, 2])
    weights = next(llama.glob("*.safetensors"))
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the weights rewritten
    after_weights = model_inputs.capture_key(str(llama), 0, str(text), 32, [1, 2])
    assert len({before, after_text, after_weights}) == 3
    assert model_inputs.capture_key(str(llama), 1, str(text), 32, [1, 2]) != after_weights  # the layer
    assert model_inputs.capture_key(str(llama), 0, str(text), 16, [1, 2]) != after_weights  # N


@needs_hf
def test_a_text_that_is_not_a_regular_file_is_refused_as_a_reason(llama, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"is not a regular file"):
        inputs.make_inputs("model", {"path": str(llama), "tokenizer": "bytes", "text": str(fifo)}, seed=0, **SHAPE)


def test_read_user_text_refuses_pipes_devices_folders_and_large_files(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for path in ("/dev/zero", tmp_path, fifo):  # the pipe last: without the check, opening it blocks
        with pytest.raises(UsageError, match=r"--text .* is not a regular file"):
            read_user_text(path, what="--text")
    big = tmp_path / "big.txt"
    big.write_text("x" * 2049)
    with pytest.raises(UsageError, match=r"above the .* MiB a text may have"):
        read_user_text(big, what="--text", limit_bytes=2048)
    assert read_user_text(big, what="--text", limit_bytes=2049) == "x" * 2049
    with pytest.raises(UsageError, match=r"--text .*missing.* cannot be read"):
        read_user_text(tmp_path / "missing", what="--text")
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    with pytest.raises(UsageError, match=r"cannot be read as UTF-8"):
        read_user_text(tmp_path / "latin1.txt", what="--text")


def test_a_generator_of_another_module_cannot_take_a_built_in_name():
    def gaussian(B, H, N, M, D, *, generator, device):  # a plugin's function, named like the built-in
        raise AssertionError("never called")

    gaussian.__module__, gaussian.__qualname__ = "a_plugin", "gaussian"  # as a plugin module's top-level function
    with pytest.raises(ValueError, match=r"'gaussian' is already registered by harness\.inputs\.gaussian"):
        inputs.register_inputs("gaussian")(gaussian)
    assert registry._INPUTS["gaussian"].fn.__module__ == "harness.inputs"


def _starts():
    return torch.randint(0, 2**62, (2,), generator=torch.Generator().manual_seed(5)).tolist()
