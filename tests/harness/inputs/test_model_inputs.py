"""The `model` input distribution: a tiny llama's own q, k, v at the cell's N, shape refusals with the model's values,
captures cached in the run folder (a resume does not re-run the model)."""

from __future__ import annotations

import csv

import pytest
import torch

from harness import inputs
from harness.commands import main
from harness.executors.distributions import store_distribution
from harness.inputs import model as model_inputs
from harness.measure import MeasureContext, MeasureSettings
from harness.measure.reference import sample_rows
from harness.models import hf_adapter, hf_model
from harness.schema import Cell
from harness.store.distributions import read_distributions
from tests.helpers.tiny_hf import save_tiny

pytestmark = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("llama"), "llama")


def test_the_layers_own_qkv_seeded_and_post_rope(llama):
    entry = f"model:path={llama},layer=1,tokenizer=bytes"
    name, params = inputs.parse_inputs(entry)
    q, k, v = inputs.make_inputs(name, params, B=2, H=4, N=64, D=16, seed=3, H_kv=2)
    assert q.shape == (2, 4, 64, 16) and k.shape == v.shape == (2, 2, 64, 16)
    again = inputs.make_inputs(name, params, B=2, H=4, N=64, D=16, seed=3, H_kv=2)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), again))
    # the same as capturing layer 1 of the model on those tokens directly
    net = hf_model.load_pretrained(str(llama))
    stream = model_inputs._stream(str(llama), "", "bytes")
    starts = torch.randint(0, 2**62, (2,), generator=torch.Generator().manual_seed(3)).tolist()
    split = len(stream) * 3 // 4
    ids = torch.tensor([stream[s % (split - 64) : s % (split - 64) + 64] for s in starts])
    direct = hf_model.capture_qkv(net, lambda: net(input_ids=ids, use_cache=False), layers=[1])[0]
    assert torch.allclose(q, direct[0]) and torch.allclose(k, direct[1])


@pytest.mark.parametrize(
    "shape,message",
    [
        (dict(H=8, D=16), r"the model has H=4 heads, H_kv=2 key/value heads and head_dim D=16.*--heads 4 --kv-heads 2"),
        (dict(H=4, D=32), r"head_dim D=16, the cell asks H=4, H_kv=4, D=32"),
        (dict(H=4, H_kv=4, D=16), r"the model has H=4 heads, H_kv=2 key/value heads.*--kv-heads 2"),
        (dict(H=4, D=16, M=32), r"kv_len must equal seq_len"),
    ],
)
def test_a_shape_other_than_the_models_is_refused_with_its_values(llama, shape, message):
    with pytest.raises(ValueError, match=message):
        inputs.make_inputs("model", {"path": str(llama), "tokenizer": "bytes"}, B=1, N=64, seed=0, **shape)
    with pytest.raises(ValueError, match=r"model:path=DIR"):
        inputs.make_inputs("model", {}, B=1, H=4, N=64, D=16, seed=0)


@pytest.mark.slow
def test_sweep_rows_with_the_models_shape_and_a_resume_does_not_recapture(llama, tmp_path, monkeypatch, capsys):
    argv = ["sweep", "--device", "cpu", "--variants", "dense,sliding_window:window=16", "--seq-lens", "64"]
    argv += ["--batch", "1", "--heads", "4", "--kv-heads", "2", "--head-dims", "16"]
    argv += [
        "--inputs",
        f"model:path={llama},layer=0,tokenizer=bytes",
        "--time-budget",
        "0.01",
        "--repeats",
        "1",
        "--quiet",
    ]
    assert main([*argv, "--out", str(tmp_path), "--run-id", "r"]) == 0, capsys.readouterr().err
    run = tmp_path / "r"
    rows = list(csv.DictReader((run / "rows.csv").open()))
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert {(r["kv_heads"], r["head_dim"]) for r in rows} == {("2", "16")}
    cached = sorted((run / model_inputs.CACHE_FOLDER).glob("*.safetensors"))
    assert cached
    # a resume that has to run a cell again reads the capture from the run folder, never the model
    lines = (run / "rows.csv").read_text().splitlines()
    (run / "rows.csv").write_text("\n".join(lines[:-1]) + "\n")
    model_inputs._model.cache_clear()
    monkeypatch.setattr(model_inputs, "_model", lambda path: pytest.fail("the model ran again on resume"))
    assert main(["sweep", "--resume", str(run), "--quiet"]) == 0, capsys.readouterr().err
    assert [r["status"] for r in csv.DictReader((run / "rows.csv").open())] == ["ok", "ok"]
    assert sorted((run / model_inputs.CACHE_FOLDER).glob("*.safetensors")) == cached


def test_a_qwen2_style_model_gives_its_own_mqa_shape(tmp_path):
    """Qwen2-style (q/k/v biases, one key/value head): its H_kv=1 is what the inputs have and what a cell must ask."""
    folder = save_tiny(tmp_path / "qwen2", "qwen2")
    name, params = inputs.parse_inputs(f"model:path={folder},layer=0,tokenizer=bytes")
    q, k, v = inputs.make_inputs(name, params, B=1, H=4, N=32, D=16, seed=0, H_kv=1)
    assert q.shape == (1, 4, 32, 16) and k.shape == v.shape == (1, 1, 32, 16)
    assert torch.isfinite(q).all() and k.abs().sum() > 0
    with pytest.raises(ValueError, match=r"H_kv=1 key/value heads.*--kv-heads 1"):
        inputs.make_inputs(name, params, B=1, H=4, N=32, D=16, seed=0, H_kv=2)


def test_a_model_layers_attention_distribution_is_stored_like_any_inputs(llama, tmp_path):
    """--inputs model runs show the model layer's heads: the worker's path (harness.executors.distributions) on the
    layer's own q, k (GQA: head h reads K/V head h // 2), its entropies as computed here from those q, k."""
    entry = f"model:path={llama},layer=1,tokenizer=bytes"
    cell = Cell(
        variant="dense", config={}, seq_len=64, kv_len=64, batch=2, heads=4, kv_heads=2, head_dim=16,
        dtype="float32", device="cpu", causal=True, mode="forward", inputs=entry, seed=3,
    )  # fmt: skip
    settings = MeasureSettings(error_rows=16)
    path = store_distribution(cell, settings, MeasureContext(), tmp_path)
    record = read_distributions(tmp_path)[0]
    assert path is not None and record["key"]["inputs"] == entry and len(record["heads"]) == 2 * 4
    name, params = inputs.parse_inputs(entry)
    q, k, _ = inputs.make_inputs(name, params, B=2, H=4, N=64, D=16, seed=3, H_kv=2)
    scores = q.double() @ k.double().repeat_interleave(2, dim=1).transpose(-1, -2) / 4  # (B, H, N, N)
    future = torch.ones(64, 64, dtype=torch.bool).triu(1)
    w = torch.softmax(scores.masked_fill(future, float("-inf")), -1)[:, :, sample_rows(64, 16, 3)]  # (B, H, R, N)
    entropy = -(w * w.clamp_min(1e-300).log()).sum(-1).mean(-1)  # (B, H)
    assert [h["entropy"] for h in record["heads"]] == pytest.approx(entropy.flatten().tolist(), abs=1e-9)
