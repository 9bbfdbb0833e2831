"""An input distribution that can make none of the sweep's shapes is refused before the run: exit 2, one line naming the
flags to use, no run folder; one that fits some shapes is measured (the rest are `unsupported` rows)."""

from __future__ import annotations

import pytest

from harness.commands import main
from harness.errors import UsageError
from harness.inputs import model as model_inputs
from harness.models import hf_adapter, minilm
from harness.runner import sweep_spec
from tests.helpers.tiny_hf import save_tiny

needs_hf = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)
SMALL = ["--device", "cpu", "--variants", "dense", "--batch", "1", "--error-budgets", "none"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A tiny llama: H=4, H_kv=2, D=16, 1024 positions."""
    return save_tiny(tmp_path_factory.mktemp("llama"), "llama")


def _refused(argv: list[str], tmp_path, capsys) -> str:
    """The one line `sweep argv` exits 2 with, after checking that no run folder (nor --out) was made."""
    out = tmp_path / "out"
    assert main(["sweep", *SMALL, *argv, "--out", str(out), "--run-id", "r"]) == 2
    err = capsys.readouterr().err
    assert not out.exists(), "a refused spec made a run folder"
    assert err.count("\n") == 1 and err.startswith("error: --inputs: "), err
    return err


@needs_hf
@pytest.mark.parametrize(
    "argv,expected",
    [
        (  # the model's H, H_kv and D, named as flags
            ["--heads", "8", "--head-dims", "64", "--seq-lens", "64,128"],
            (
                "can make none of this sweep's 2 shapes (the first: --heads 8 --kv-heads 8 --head-dims 64 --seq-lens "
                "64): inputs 'model': the model has H=4 heads, H_kv=2 key/value heads and head_dim D=16, the cell asks "
                "H=8, H_kv=8, D=64; run with --heads 4 --kv-heads 2 --head-dims 16"
            ),
        ),
        (  # only the key/value heads are wrong
            ["--heads", "4", "--kv-heads", "4", "--head-dims", "16", "--seq-lens", "64"],
            "run with --heads 4 --kv-heads 2 --head-dims 16",
        ),
        (  # beyond the model's positions
            ["--heads", "4", "--kv-heads", "2", "--head-dims", "16", "--seq-lens", "2048"],
            "seq_len N=2048 is beyond the model's max_position_embeddings 1024",
        ),
    ],
)
def test_a_model_input_that_fits_no_cell_is_exit_2_from_its_config_alone(
    llama, argv, expected, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(model_inputs, "_model", lambda path: pytest.fail("the spec check loaded the weights"))
    err = _refused(["--inputs", f"model:path={llama},tokenizer=bytes", *argv], tmp_path, capsys)
    assert expected in err


def test_a_model_input_without_its_folder_is_exit_2(tmp_path, capsys):
    err = _refused(["--inputs", "gaussian,model", "--seq-lens", "64"], tmp_path, capsys)
    assert "'model' can make none" in err and "write it as model:path=DIR" in err


@pytest.mark.skipif(minilm.missing_extra_reason() is not None, reason="the real-model extra is not installed")
@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--heads", "8", "--head-dims", "64", "--seq-lens", "64"], "head_dim 32, got D=64; pass --head-dims 32"),
        (["--heads", "8", "--head-dims", "32", "--seq-lens", "1024"], "pass --seq-lens of at most 512"),
        (["--heads", "100", "--head-dims", "32", "--seq-lens", "64"], "got H=100; pass --heads of at most 72"),
    ],
)
def test_a_real_input_that_fits_no_cell_is_exit_2_with_minilms_values(argv, expected, tmp_path, capsys):
    err = _refused(["--inputs", "real", *argv], tmp_path, capsys)
    assert "'real' can make none" in err and expected in err


@needs_hf
def test_an_input_that_fits_some_shapes_is_measured_and_fitting_shapes_pass(llama):
    entry = f"model:path={llama},tokenizer=bytes"
    fits = {"inputs": entry, "heads": "4", "kv_heads": "2", "head_dims": "16", "device": "cpu", "variants": "dense"}
    assert sweep_spec(cli={**fits, "seq_lens": "64,128"}).inputs == (entry,)
    # 2048 is beyond the model's positions, 64 is not: the sweep runs, N=2048's cells are `unsupported` rows
    assert sweep_spec(cli={**fits, "seq_lens": "64,2048"}).seq_lens == (64, 2048)
    # a second head dim the model lacks, beside its own, is measured too
    assert sweep_spec(cli={**fits, "seq_lens": "64", "head_dims": "16,32"}).head_dims == (16, 32)
    with pytest.raises(UsageError, match=r"none of this sweep's 2 shapes"):
        sweep_spec(cli={**fits, "seq_lens": "64", "head_dims": "8,32"})


@needs_hf
def test_a_remote_executors_workers_judge_their_own_inputs(tmp_path, capsys):
    """A Slurm sweep's model folder may exist on the cluster only: planning it here is not refused for its inputs."""
    argv = ["sweep", *SMALL, "--executor", "slurm", "--device", "cuda", "--dry-run"]
    argv += ["--inputs", f"model:path={tmp_path / 'on-the-cluster'}", "--heads", "4", "--head-dims", "16"]
    assert main(argv) == 0, capsys.readouterr().err
    local = ["sweep", *SMALL, "--dry-run", "--inputs", f"model:path={tmp_path / 'on-the-cluster'}"]
    assert main(local + ["--heads", "4", "--head-dims", "16"]) == 2  # run here: the missing folder is refused at once
    assert "error: --inputs: " in capsys.readouterr().err
