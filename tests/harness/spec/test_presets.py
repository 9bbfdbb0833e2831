"""--preset NAME: a small embedded spec over the device's default, under --config and the flags; an unknown name is one
line, exit 2, naming the presets."""

from __future__ import annotations

import pytest

import harness.api as api
from harness.commands import main
from harness.errors import UsageError
from harness.plan import plan
from harness.runner import sweep_spec
from harness.spec import build_spec
from harness.spec.presets import PRESETS


def test_the_quick_preset_plans_six_cells_over_the_device_default():
    spec = sweep_spec(preset="quick", cli={"device": "cpu"})
    assert [e.name for e in spec.variants] == ["dense", "sliding_window", "chunked"]
    assert (spec.seq_lens, spec.inputs, spec.error_budgets, spec.clock) == ((512, 2048), ("local",), (0.1,), "cpu")
    assert len(plan(spec)) == 6  # 3 variants x 2 lengths, sliding_window once (one budget)
    assert spec.where("seq_lens") == "preset quick: seq_lens"
    assert (spec.error_rows, spec.where("error_rows")) == (256, "default spec: error_rows")  # left to cpu.toml
    # every axis is the preset's, so a GPU's quick sweep is as small (gpu.toml has GQA, bf16, train, decode)
    assert len(plan(build_spec(preset="quick", cli={"device": "cuda"}))) == 6


def test_flags_and_a_config_file_lie_over_the_preset(tmp_path):
    config = tmp_path / "spec.toml"
    config.write_text('inputs = ["gaussian"]\n')
    spec = sweep_spec(preset="quick", toml_path=config, cli={"device": "cpu", "seq_lens": "256"})
    assert (spec.seq_lens, spec.inputs, spec.heads) == ((256,), ("gaussian",), 8)
    assert len(plan(spec)) == 3


def test_the_quick_preset_dry_run_plans_its_cells(capsys):
    assert main(["sweep", "--preset", "quick", "--device", "cpu", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "6 cells planned" in out and out.count(" local\n") == 6


def test_an_unknown_preset_is_one_line_exit_2_naming_the_presets(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["sweep", "--preset", "quik", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --preset 'quik': no such preset; the presets: quick (a first look")
    assert err.endswith("Did you mean 'quick'?\n") and err.count("\n") == 1
    assert not out.exists()


def test_a_resumed_run_refuses_a_preset(tmp_path, capsys):
    assert main(["sweep", "--resume", str(tmp_path), "--preset", "quick"]) == 2
    assert "--resume replays the run's own spec.toml; drop --preset" in capsys.readouterr().err


def test_sweep_help_lists_every_preset(capsys):
    try:
        main(["sweep", "--help"])
    except SystemExit:
        pass
    text = " ".join(capsys.readouterr().out.split())
    assert "--preset NAME" in text
    for name, line in PRESETS.items():
        assert f"{name}: {' '.join(line.split())}" in text


def test_the_python_sweep_takes_a_preset_as_the_flag_does(monkeypatch):
    measured = []

    def stop(spec, **_):
        measured.append(spec)
        raise KeyboardInterrupt  # planned, not run

    monkeypatch.setattr(api, "run_sweep", stop)
    with pytest.raises(KeyboardInterrupt):
        api.sweep(preset="quick", device="cpu", seq_lens=[256])
    assert len(plan(measured[0])) == 3 and measured[0].inputs == ("local",)
    with pytest.raises(UsageError, match=r"--preset 'quik': no such preset; the presets: quick"):
        api.sweep(preset="quik")
