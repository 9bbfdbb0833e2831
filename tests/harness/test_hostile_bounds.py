"""Issue 40 items 4 and 5 replayed: every file under a run folder is written without following a link, and every size
is bounded before work (docs/reliability.md, "Trust and the run folder").

A planted link is refused and nothing is written through it; a bad flag exits 2 with one line naming the flag, what
was given and what is expected; a cell too big for the host is an `oom` row with the estimate, its inputs never made.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.models import hf_adapter
from tests.harness.test_hostile_trust import PLAN, one_line_exit

HUGE_N = "99999999999"  # a 204 TB allocation in `tasks` before the bound
needs_hf = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    return victim


def _plant_link(folder: Path, name: str, victim: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).symlink_to(victim)
    return folder / name


# ---- 4. every file under the run folder: one safe-write path ----------------------------------------------------
@pytest.mark.parametrize("name", ["tasks.csv", "tasks.json", "tasks.md", "tasks.png"])
def test_a_study_output_that_is_a_planted_link_is_refused_and_nothing_is_written_through_it(name, tmp_path):
    from harness.report.render import Paragraph
    from harness.studies.plots import plot_tasks
    from harness.studies.results_io import write_results

    victim, run = _victim(tmp_path), tmp_path / "run"
    _plant_link(run, name, victim)
    rows = [{"task": "copy", "variant": "dense", "config": {}, "seq_len": 16, "accuracy": 0.5, "chance": 0.25}]
    with pytest.raises(UsageError, match=rf"{re.escape(str(run / name))} is a symbolic link"):
        write_results(run, "tasks", rows, {}, summary=[Paragraph("x")], plot=plot_tasks)
    assert victim.read_text() == "keep"


def test_deploy_rows_fitted_states_and_a_linked_run_folder_are_refused(tmp_path):
    import torch

    from harness.executors.worker import fitted_path, store_fitted
    from harness.studies import deploy
    from harness.studies.results_io import output_dir
    from variants import build_variant

    victim, run = _victim(tmp_path), tmp_path / "run"
    _plant_link(run, "deploy.jsonl", victim)
    with pytest.raises(UsageError, match=r"deploy.jsonl is a symbolic link"):
        deploy.run_deploy(
            ["dense"], [16, 32], shape=deploy.DeployShape(), overrides={}, seed=0, wanted=(), folder=run, npm_cache=run
        )
    planted = fitted_path(run, "a fit")
    _plant_link(planted.parent, planted.name, victim)
    with pytest.raises(UsageError, match=r"\.pt is a symbolic link"):
        store_fitted(run, "a fit", (build_variant("dense"), 1.0, {}))
    assert victim.read_text() == "keep" and not planted.with_suffix(".json").exists()
    fine = store_fitted(tmp_path / "other", "a fit", (build_variant("dense"), 1.0, {}))  # a plain folder: written
    assert torch.load(fine, weights_only=True)["name"] == "dense"
    (tmp_path / "linked_run").symlink_to(run)
    with pytest.raises(UsageError, match=r"is a symbolic link"):
        output_dir("tasks", run=str(tmp_path / "linked_run"))


@needs_hf
def test_a_model_input_capture_is_never_written_through_a_planted_link(tmp_path):
    from harness import inputs
    from harness.inputs import model as model_inputs
    from tests.helpers.tiny_hf import save_tiny

    llama, victim, run = save_tiny(tmp_path / "llama", "llama"), _victim(tmp_path), tmp_path / "run"
    shape = dict(B=2, H=4, N=32, D=16, H_kv=2)
    with model_inputs.run_folder(run):
        inputs.make_inputs("model", {"path": str(llama), "tokenizer": "bytes"}, seed=5, **shape)
        (file,) = (run / model_inputs.CACHE_FOLDER).glob("*.safetensors")
        file.unlink()
        file.symlink_to(victim)
        with pytest.raises(UsageError, match=r"\.safetensors is a symbolic link"):
            inputs.make_inputs("model", {"path": str(llama), "tokenizer": "bytes"}, seed=5, **shape)
    assert victim.read_text() == "keep"


def test_a_study_csv_defuses_formulas_exactly_as_rows_csv_does(tmp_path):
    from harness.studies.results_io import write_table

    rows = [{"variant": '=HYPERLINK("http://evil","x")', "note": "@SUM(A1)", "x": -1.5, "text": "-1.5"}]
    (csv, _) = write_table(tmp_path, "model_eval", rows, {})
    text = csv.read_text()
    assert "'=HYPERLINK(" in text and "'@SUM(A1)" in text and ",-1.5,-1.5" in text and "'-1.5" not in text


# ---- 5. bounds before work ----------------------------------------------------------------------------------------
STUDY_BOUNDS = [
    (["tasks", "--device", "cpu", "--seq-lens", f"64,{HUGE_N}"], "--seq-lens"),
    (["deploy", "--seq-lens", f"128,{HUGE_N}"], "--seq-lens"),
    (["deploy", "--heads", "100000"], "--heads"),
]


@pytest.mark.parametrize("argv,flag", STUDY_BOUNDS)
def test_a_study_length_or_shape_beyond_the_sweeps_bound_is_one_line_exit_2(argv, flag, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a study that ran anyway would write here
    line = one_line_exit(argv, capsys)
    assert re.search(rf"{flag}: \d+ is beyond what any machine holds; the limit is \d+", line), line
    assert list(tmp_path.iterdir()) == []


@needs_hf
def test_model_eval_lengths_are_bounded_before_the_model_is_read(capsys, tmp_path):
    argv = ["model-eval", "--device", "cpu", "--model", str(tmp_path / "none"), "--seq-lens", f"1k,{HUGE_N}"]
    line = one_line_exit(argv, capsys)
    assert f"--seq-lens: {HUGE_N} is beyond what any machine holds; the limit is 16777216" in line, line


@pytest.mark.parametrize("budget,size", [("0.5", 0), ("100B", 100), ("0.9KiB", 921)])
def test_a_memory_budget_below_the_minimum_is_refused_not_read_as_zero(budget, size, capsys):
    line = one_line_exit([*PLAN, "--memory-budget", budget], capsys)
    assert f"--memory-budget: '{budget}' is {size} bytes, below the minimum of 1024 bytes" in line, line


def test_a_cell_too_big_for_the_hosts_free_memory_is_an_oom_row_before_its_inputs_are_made(monkeypatch):
    from harness.measure import MeasureContext, measure_cell, roofline
    from tests.harness.measure.test_measure import FAST, RUN, cell

    def never(*args, **kwargs):
        raise AssertionError("the inputs were made")

    monkeypatch.setattr(MeasureContext, "cell_inputs", never)
    monkeypatch.setattr(roofline, "free_host_memory_bytes", lambda: 10_000)
    big = cell(N=64)  # B=1, H=2, D=16 float32: q, k, v, out 32768 bytes + q, k, v in float64 49152
    assert roofline.inputs_and_reference_bytes(big) == 81_920
    row = measure_cell(big, FAST, RUN)
    assert row.status == "oom" and "need at least 81920 bytes" in row.reason and "10000 bytes" in row.reason, row.reason


def test_the_report_of_a_model_inputs_run_draws_its_maps_on_gaussian_inputs(tmp_path):
    from harness.report.heatmaps import MapOptions, draw_maps
    from tests.helpers.synthetic_run import analysed_rows, make_rows

    rows = make_rows(variants=("dense",), lengths=(256,), inputs=(f"model:path={tmp_path / 'llama'},tokenizer=bytes",))
    drawn = draw_maps(analysed_rows(rows), tmp_path / "attention_maps.png", MapOptions(n=8, fitted=False))
    assert drawn is not None and drawn.path.is_file() and "on 'gaussian' inputs" in drawn.caption


def test_maps_fall_back_to_gaussian_when_the_runs_model_refuses_the_probe(tmp_path, monkeypatch):
    """A model the swap refuses (an ALiBi model, a layer that bypasses the adapter) raises NotSupportedError while the
    probe is captured: the maps are drawn on gaussian inputs, the report does not fail."""
    from harness.report import maps_isolated
    from harness.report.heatmaps import MapOptions, draw_maps
    from tests.helpers.synthetic_run import analysed_rows, make_rows
    from variants import NotSupportedError

    made = maps_isolated.make_probe

    def refusing(n, inputs, **kwargs):
        if inputs != "gaussian":
            raise NotSupportedError("BloomForCausalLM: ALiBi position biases bypass the attention interface")
        return made(n, inputs, **kwargs)

    monkeypatch.setattr(maps_isolated, "make_probe", refusing)
    rows = make_rows(variants=("dense",), lengths=(256,), inputs=(f"model:path={tmp_path / 'bloom'}",))
    drawn = draw_maps(analysed_rows(rows), tmp_path / "attention_maps.png", MapOptions(n=8, fitted=False))
    assert drawn is not None and drawn.path.is_file() and "on 'gaussian' inputs" in drawn.caption
