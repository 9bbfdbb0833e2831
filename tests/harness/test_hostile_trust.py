"""Issue 24 part A replayed: untrusted spec files and run folders, planted links, bad values, injected text, signals.

Every case goes through the CLI (in-process, one subprocess for SIGTERM) and must end in one line with exit 2
(usage) or the right row or file, never a traceback and never a wrong exit 0 (docs/reliability.md, "Trust and the
run folder").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.commands import main
from tests.helpers.load import load_scaled

TINY = ["--device", "cpu", "--heads", "1", "--head-dims", "8", "--time-budget", "0.005", "--repeats", "1"]
TINY += ["--error-rows", "8", "--calibration-steps", "3", "--quiet", "--inputs", "gaussian"]
PLAN = ["sweep", "--device", "cpu", "--variants", "dense", "--dry-run"]


def one_line_exit(argv: list[str], capsys, code: int = 2) -> str:
    """Run the CLI; assert the exit code, one line on stderr and no traceback; return that line."""
    got = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert got == code, (got, err)
    lines = [line for line in err.strip().splitlines() if not line.startswith("note:")]
    assert len(lines) == 1, err
    return lines[0]


# ---- 1. trust: what a file asks to run or connect to, and values bound for a job script ------------------------
def _spec_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "someone_elses.toml"
    path.write_text('variants = ["dense"]\n' + text)
    return str(path)


FILE_TRUST = [
    ('executor = "slurm"\nslurm_cluster = "local"\n', r"sets executor = 'slurm'.*pass --trust-config"),
    ('executor = "ray"\nray_address = "ray://evil:10001"\n', r"sets executor = 'ray', ray_address = 'ray://evil"),
    ('executor = "slurm"\nslurm_extra = ["account=x"]\n', r"sets executor = 'slurm', slurm_extra"),
    ('slurm_partition = "gpu"\n', r"sets slurm_partition = 'gpu'"),
    ('plugins = ["/tmp/no_such_plugin.py"]\n', r"names plugins /tmp/no_such_plugin.py.*--trust-config"),
]


@pytest.mark.parametrize("text,match", FILE_TRUST)
def test_a_spec_file_cannot_choose_an_executor_or_its_options_without_trust(text, match, tmp_path, capsys):
    line = one_line_exit(["sweep", "--config", _spec_file(tmp_path, text), "--device", "cpu", "--dry-run"], capsys)
    assert re.search(match, line), line


def test_trust_config_takes_them_and_trust_plugins_is_its_older_name(tmp_path, capsys):
    path = _spec_file(tmp_path, 'executor = "ray"\nray_address = "auto"\n')
    for flag in ("--trust-config", "--trust-plugins"):
        assert main(["sweep", "--config", path, "--device", "cpu", "--dry-run", flag]) == 0
        err = capsys.readouterr().err
        assert ("is now --trust-config" in err) == (flag == "--trust-plugins"), err
    # the flags on the command line count as the user's own
    assert main(["sweep", "--config", path, "--device", "cpu", "--dry-run", "--executor", "ray"]) == 2  # ray_address
    assert "ray_address = 'auto'" in capsys.readouterr().err


INJECTED = [
    (["--executor", "slurm", "--slurm-extra", "account=x\n#SBATCH --wrap=id"], r"--slurm-extra: 'x\\n#SBATCH"),
    (["--executor", "slurm", "--slurm-extra", "acc$ount=x"], r"--slurm-extra: 'acc\$ount=x' is not key=value"),
    (["--executor", "slurm", "--slurm-extra", "account=x'; id; '"], r"is not a plain value"),
    (["--executor", "slurm", "--slurm-partition", "gpu\nid"], r"--slurm-partition: 'gpu\\nid' is not a plain value"),
    (["--executor", "ray", "--ray-address", "auto\n#x"], r"--ray-address: 'auto\\n#x' is not a plain value"),
    (["--executor", "ray", "--ray-address", "$(id)"], r"--ray-address: '\$\(id\)' is not a plain value"),
]


@pytest.mark.parametrize("argv,match", INJECTED)
def test_values_bound_for_a_job_script_or_command_line_match_a_strict_pattern(argv, match, capsys):
    line = one_line_exit([*PLAN, *argv, "--slurm-cluster", "local"] if "slurm" in argv else [*PLAN, *argv], capsys)
    assert re.search(match, line), line


def test_a_trusted_file_is_held_to_the_same_pattern(tmp_path, capsys):
    path = _spec_file(tmp_path, 'executor = "slurm"\nslurm_cluster = "local"\nslurm_extra = ["account=x\\nid"]\n')
    line = one_line_exit(["sweep", "--config", path, "--device", "cpu", "--dry-run", "--trust-config"], capsys)
    assert "slurm_extra: 'x\\nid' is not a plain value" in line


# ---- 2. the run folder: no link followed, plain files only ----------------------------------------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished one-cell run folder (the report stubbed), copied by each test that plants something in it."""
    import harness.report

    out = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(harness.report, "write_report", lambda *a, **k: None)
        argv = ["sweep", *TINY, "--variants", "dense", "--seq-lens", "16", "--out", str(out), "--run-id", "base"]
        assert main(argv) == 0
    return out / "base"


@pytest.fixture
def run_copy(finished_run, tmp_path):
    copy = tmp_path / "runs" / "r"
    shutil.copytree(finished_run, copy)
    return copy


def _plant(run_dir: Path, name: str, kind: str, victim: Path) -> None:
    path = run_dir / name
    if path.is_dir() and not path.is_symlink():  # a folder the run wrote (distributions/)
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    if kind == "link":
        path.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


PLANTED = [
    ("rows.jsonl", "link"),
    ("rows.jsonl", "fifo"),  # blocked a resume forever
    ("rows.jsonl", "folder"),
    ("spec.toml", "link"),
    ("env.json", "link"),
    (".lock", "link"),
    ("rows.csv", "link"),
    ("report.md", "link"),
    ("report.html", "fifo"),
    ("fitted", "link"),  # calibrated variants are stored there
    (".cells", "link"),  # isolated cells' temp folders
    ("model_inputs", "link"),  # the `model` inputs' captures (issue 40)
    ("distributions", "link"),  # the inputs' attention distributions (issue 39)
]


@pytest.mark.parametrize("name,kind", PLANTED)
def test_resume_refuses_a_planted_link_fifo_or_folder_and_writes_nothing_through_it(name, kind, run_copy, capsys):
    victim = run_copy.parent / "victim.txt"
    victim.write_text("root:x:0:0\n")
    if name in (
        "fitted",
        ".cells",
        "model_inputs",
        "distributions",
    ):  # folders the run writes into: a link to a folder of someone else's
        victim = run_copy.parent / "victim_folder"
        victim.mkdir()
    _plant(run_copy, name, kind, victim)
    line = one_line_exit(["sweep", "--resume", str(run_copy)], capsys)
    expected = {"link": "a symbolic link", "fifo": "a FIFO", "folder": "a folder"}[kind]
    assert f"{run_copy / name} is {expected}" in line, line
    assert (victim.read_text() == "root:x:0:0\n") if victim.is_file() else list(victim.iterdir()) == []


def test_a_run_folder_that_is_a_link_is_refused_for_a_sweep_and_a_resume(tmp_path, capsys):
    elsewhere, out = tmp_path / "elsewhere", tmp_path / "out"
    elsewhere.mkdir()
    out.mkdir()
    (out / "r").symlink_to(elsewhere)
    argv = ["sweep", *TINY, "--variants", "dense", "--seq-lens", "16", "--out", str(out), "--run-id", "r"]
    assert "is a symbolic link" in one_line_exit(argv, capsys)
    assert "is a symbolic link" in one_line_exit(["sweep", "--resume", str(out / "r")], capsys)
    assert list(elsewhere.iterdir()) == []


def test_files_written_whole_replace_a_link_never_write_through_it(tmp_path):
    from harness.errors import UsageError
    from harness.store import open_plain, write_plain

    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "report.md").symlink_to(victim)
    with pytest.raises(UsageError, match=r"report.md is a symbolic link"):
        write_plain(tmp_path / "report.md", "x")
    with pytest.raises(UsageError, match=r"report.md is a symbolic link"):
        open_plain(tmp_path / "report.md", "a")
    (tmp_path / "hard").hardlink_to(victim)  # a hard link's other name is never written: a new file replaces it
    write_plain(tmp_path / "hard", "new")
    assert victim.read_text() == "keep" and (tmp_path / "hard").read_text() == "new"


def test_a_folder_left_before_its_spec_says_to_rerun_with_the_same_run_id(tmp_path, capsys):
    (tmp_path / "r").mkdir()
    line = one_line_exit(["sweep", "--resume", str(tmp_path / "r")], capsys)
    assert f"run the same sweep again with --out {tmp_path} --run-id r" in line


# ---- 6. validation: every bad value one line -------------------------------------------------------------------
HUGE = "1" + "0" * 20
BAD_VALUES = [
    (["--seq-lens", HUGE], r"--seq-lens: 1\d+ is beyond what any machine holds; the limit is 16777216"),
    (["--batch", HUGE], r"--batch: must be <= 65536"),
    (["--heads", HUGE], r"--heads: must be <= 4096"),
    (["--head-dims", HUGE], r"--head-dims: 1\d+ is beyond what any machine holds"),
    (["--kv-heads", HUGE], r"--kv-heads: 1\d+ is beyond"),
    (["--phases", "decode", "--decode-steps", HUGE], r"--decode-steps: must be <= 1048576"),
    (["--repeats", HUGE], r"--repeats: must be <= 1048576"),
    (["--seq-lens", "1k..16k..32k"], r"range '1k..16k..32k' has more than one '..'"),
    (["--seq-lens", "64,,128"], r"--seq-lens: '64,,128' has an empty item"),
    (["--seq-lens", "64,"], r"has an empty item"),
    (["--variants", "dense,,chunked"], r"has an empty item"),
    (["--dtypes", "float32,,bf16"], r"--dtypes: .* has an empty item"),
    (["--inputs", "gaussian:scale=nan"], r"--inputs: 'gaussian:scale=nan': scale must be a finite number > 0"),
    (["--inputs", "gaussian:scale=-1"], r"scale must be a finite number > 0, got -1"),
    (["--inputs", "gaussian:scale=0"], r"scale must be a finite number > 0, got 0"),
    (["--inputs", "gaussian:scale=inf"], r"scale must be a finite number > 0, got inf"),
    (["--phases", "decode", "--modes", "train"], r"decode, which is forward only, but --modes has no forward"),
    (["--phases", "decode", "--causals", "false"], r"decode, which is causal, but --causals = false"),
    (["--modes", "train", "--recomputes", "layer", "--scopes", "attention"], r"the spec plans 0 cells"),
    (["--variants", "sliding_window:window=64,window=128"], r"sets 'window' twice"),
    (["--inputs", "gaussian:scale=2,scale=3"], r"sets 'scale' twice"),
    (["--time-budget", "nan"], r"--time-budget: expected a finite number, got nan"),
    (["--timeout", "inf"], r"--timeout: expected a finite number, got inf"),
    (["--seed", "-1"], r"--seed: must be >= 0"),
]


@pytest.mark.parametrize("argv,match", BAD_VALUES)
def test_a_bad_value_is_one_line_exit_2_even_when_only_planning(argv, match, capsys):
    line = one_line_exit([*PLAN, *argv], capsys)
    assert re.search(match, line), line


def test_a_device_index_is_checked_when_only_planning(capsys):
    line = one_line_exit(["sweep", "--device", "cuda:99", "--variants", "dense", "--dry-run"], capsys)
    assert re.search(r"--device: (CUDA is not available here|'cuda:99' does not exist)", line), line


EMPTY = [
    (["sweep", "--out", "", "--variants", "dense"], r"--out '': expected a value"),
    (["sweep", "--plugin", "", "--variants", "dense"], r"--plugin '': expected a value"),
    (["sweep", "--resume", ""], r"--resume '': expected a value"),
    (["sweep", "--config="], r"--config '': expected a value"),
    (["sweep", "--run-id", "a" * 300, "--variants", "dense"], r"--run-id 'a{40}\.\.\. \(300 characters\)'"),
    (["tasks", "--variants", ""], r"--variants '': expected a value"),
    (["tasks", "--seed", "-1"], r"--seed: expected an integer in \[0, 2\*\*63\), got -1"),
    (["report", ""], r"an empty argument ''"),
]


@pytest.mark.parametrize("argv,match", EMPTY)
def test_an_empty_or_out_of_range_value_is_refused_before_anything_runs(argv, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a sweep that ran anyway would write here
    line = one_line_exit(argv, capsys)
    assert re.search(match, line), line
    assert list(tmp_path.iterdir()) == []


def test_python_m_harness_alone_prints_a_short_usage(capsys):
    line = one_line_exit([], capsys)
    assert line.startswith("usage: python -m harness COMMAND") and "sweep" in line


# ---- 7. text out is inert ----------------------------------------------------------------------------------------
def test_report_markdown_keeps_data_on_one_inert_line():
    from harness.report.overview import environment
    from harness.report.render import Code, Paragraph
    from harness.report.render import render_markdown
    from harness.store import rows_dataframe

    env = {"cpu": "Xeon\n# PWNED\n<img src=x onerror=alert(1)>", "torch": "2.13|x"}
    blocks = environment(env, rows_dataframe([])) + [Paragraph("Note: row 3\n## injected <script>")]
    blocks.append(Code('name = "```\\n# out of the fence"'))
    text = render_markdown(blocks)
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings == ["## Environment"], headings
    assert "<img" not in text and "<script" not in text and "&lt;img" in text and "2.13\\|x" in text


def test_rows_csv_defuses_formulas_but_keeps_negative_numbers(run_copy):
    import pandas as pd

    from harness.store import ROWS_FILE, inert_csv_frame, write_tables

    row = json.loads((run_copy / ROWS_FILE).read_text().splitlines()[0])
    row.update(status="error", reason='=HYPERLINK("http://evil","x")', variant="@SUM(A1)")
    (run_copy / ROWS_FILE).write_text(json.dumps(row) + "\n")
    write_tables(run_copy)
    csv = (run_copy / "rows.csv").read_text()
    assert "'=HYPERLINK(" in csv and "'@SUM(A1)" in csv
    frame = inert_csv_frame(pd.DataFrame({"text": ["-1.5", "+3", "-cmd|' /C calc'!A0", "ok"], "x": [-1.5, 2, 3, 4]}))
    assert list(frame["text"]) == ["-1.5", "+3", "'-cmd|' /C calc'!A0", "ok"] and list(frame["x"]) == [-1.5, 2, 3, 4]


# ---- 8. the smaller items -------------------------------------------------------------------------------------------
def test_a_resume_removes_what_killed_isolated_cells_left_in_the_run_folder(run_copy, capsys, no_report):
    leftover = run_copy / ".cells" / "attnsuite-cell-x"
    leftover.mkdir(parents=True)
    (leftover / "cell.json").write_text("{}")
    assert main(["sweep", "--resume", str(run_copy), "--quiet"]) == 0
    assert not (run_copy / ".cells").exists()


THREADS_PLUGIN = '''
import torch
from variants import AttentionVariant, register_variant
from variants.reference import reference_attention


@register_variant("t_one_thread")
class OneThread(AttentionVariant):
    """Exact attention that sets torch to one thread (as some libraries do on import or first call)."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        torch.set_num_threads(1)
        return reference_attention(q, k, v, causal=causal, dtype=None)


@register_variant("t_after")
class After(AttentionVariant):
    """Exact attention, run after t_one_thread in the same (plugin) process."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return reference_attention(q, k, v, causal=causal, dtype=None)
'''


@pytest.mark.slow
def test_rows_record_the_threads_each_cell_ran_with(tmp_path, no_report):
    import torch

    from variants import _registry

    plugin = tmp_path / "one_thread.py"
    plugin.write_text(THREADS_PLUGIN)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        argv = ["sweep", *TINY, "--variants", "t_one_thread,t_after,dense", "--seq-lens", "16", "--plugin", str(plugin)]
        assert main([*argv, "--out", str(tmp_path), "--run-id", "t"]) == 0
    finally:
        torch.set_num_threads(before)
        _registry._REGISTRY.pop("t_one_thread", None)
        _registry._REGISTRY.pop("t_after", None)
    rows = [json.loads(line) for line in (tmp_path / "t" / "rows.jsonl").read_text().splitlines()]
    # plugin cells run in the plugin process, where the next cell sees the one thread left; the driver keeps its two
    assert [(r["variant"], r["threads"]) for r in rows] == [("t_one_thread", 2), ("t_after", 1), ("dense", 2)]


@pytest.mark.slow
def test_sigterm_removes_the_lock_pid_says_how_to_resume_and_warnings_carry_no_source_line(run_copy, test_variants):
    """One subprocess: a resume that repairs a torn last line (a reader warning), then SIGTERM mid-cell."""
    from tests.helpers import REPO

    spec = run_copy / "spec.toml"
    spec.write_text(re.sub(r"variants = \[.*\]", 'variants = ["dense", "t_sleep:seconds=60"]', spec.read_text()))
    with open(run_copy / "rows.jsonl", "a") as f:
        f.write('{"cell_id": "torn')
    argv = [sys.executable, "-m", "harness", "sweep", "--resume", str(run_copy), "--plugin", test_variants, "--quiet"]
    child = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        lock = run_copy / ".lock"
        while time.monotonic() < deadline and not (lock.exists() and lock.read_text().strip()):
            time.sleep(0.2)
        assert lock.read_text().strip() == str(child.pid)
        time.sleep(3)  # inside the sleeping cell
        child.send_signal(signal.SIGTERM)
        err = child.communicate(timeout=load_scaled(60))[1]
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 143, err
    assert "Traceback" not in err and lock.read_text() == ""
    lines = err.strip().splitlines()
    assert lines[-1].startswith("terminated (SIGTERM)"), err
    warning = [line for line in lines if "partial last line" in line]
    assert len(warning) == 1 and warning[0].startswith("warning: ") and ".py:" not in err, err
