"""Plugins apart from built-ins (issue 40, item 3): a plugin's import cannot change what a built-in cell runs, and a
plugin's code cannot hand the driver a row.

Each way a plugin's import could reach a built-in row (a patched reference or SDPA, torch's default dtype or threads,
a `torch.backends` flag, a Tensor method, a registry entry replaced, a name taken) is refused when the plugin is
loaded, with the change named (harness.plugins, harness.process_state); a plugin that does so only in the processes
that measure built-in cells costs those cells an `error` row, never a false one. A reply the plugin writes to the
child's pipe does not carry the job's token (harness.child), and a row for another cell is refused by the driver
(harness.executors.base.row_of). docs/reliability.md lists what each test proves.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import variants
import variants.reference
from harness.commands import main
from harness.errors import UsageError
from harness.executors import Executor, run_cells
from harness.executors.worker import CellJob
from harness.measure import RunInfo, outcome_row
from harness.plugins import load_plugins
from harness.schema import Cell
from variants import _registry
from variants.dense import DenseAttention

ROOT = Path(__file__).resolve().parents[2]
HEADER = "import torch\nimport torch.nn.functional as F\nimport variants\n"
TINY = ["--device", "cpu", "--seq-lens", "16,32", "--batch", "1", "--heads", "1", "--head-dims", "8"]
TINY += ["--time-budget", "0.005", "--repeats", "1", "--error-rows", "8", "--inputs", "gaussian", "--quiet"]

# name -> (the plugin's body after HEADER, the change the refusal names)
CHANGES = {
    "reference": (
        "import variants.reference as r\nr.reference_attention = lambda *a, **k: None\n",
        "replaced variants.reference.reference_attention",
    ),
    "sdpa": ("F.scaled_dot_product_attention = lambda *a, **k: None\n", "replaced torch.nn.functional.scaled_dot"),
    "dtype": (
        "torch.set_default_dtype(torch.float64)\n",
        "torch.get_default_dtype() from torch.float32 to torch.float64",
    ),
    "threads": ("torch.set_num_threads(1)\n", "torch.get_num_threads() from 2 to 1"),
    "mkldnn": ("torch.backends.mkldnn.enabled = False\n", "torch.backends.mkldnn.enabled from True to False"),
    "tf32": (
        "torch.backends.cuda.matmul.allow_tf32 = True\n",
        "torch.backends.cuda.matmul.allow_tf32 from False to True",
    ),
    "tensor": ("torch.Tensor.softmax = lambda self, *a, **k: self\n", "added torch.Tensor.softmax (the plugin's)"),
    "method": (
        "from variants.dense import DenseAttention\nDenseAttention.forward = lambda self, q, *a, **k: q\n",
        "replaced variants.dense.DenseAttention.forward",
    ),
    "registry": (
        "from harness.inputs import registry\nregistry._INPUTS['gaussian'] = registry._INPUTS['local']\n",
        "replaced entry harness.inputs.registry._INPUTS['gaussian']",
    ),
    "inputs_name": (
        "from harness.inputs import register_inputs\n\n\n@register_inputs('gaussian')\n"
        "def gaussian(B, H, N, M, D, *, generator=None, device='cpu'):\n    '''Not the built-in.'''\n",
        "inputs name 'gaussian' is already registered by harness.inputs.gaussian",
    ),
    "spoofed_variant": (  # passes register_variant's check: the same module and qualified name as the built-in's
        "from variants import AttentionVariant, register_variant\n\n\nclass DenseAttention(AttentionVariant):\n"
        "    def forward(self, q, k, v, *, causal=False, kv_mask=None):\n        return q\n\n\n"
        "DenseAttention.__module__ = 'variants.dense'\nregister_variant('dense')(DenseAttention)\n",
        "replaced entry variants._registry._REGISTRY['dense']",
    ),
    "variant_name": (
        "from variants import AttentionVariant, register_variant\n\n\n@register_variant('dense')\n"
        "class Dense(AttentionVariant):\n    def forward(self, q, k, v, *, causal=False, kv_mask=None):\n"
        "        return q\n",
        "variant name 'dense' is already registered by variants.dense.DenseAttention",
    ),
}


@pytest.fixture
def restored(monkeypatch):
    """Whatever a refused plugin changed in this process is put back after the test."""
    from harness.inputs import registry

    registry.list_inputs()
    for owner, name in ((F, "scaled_dot_product_attention"), (variants.reference, "reference_attention")):
        monkeypatch.setattr(owner, name, getattr(owner, name))
    monkeypatch.setitem(registry._INPUTS, "gaussian", registry._INPUTS["gaussian"])
    monkeypatch.setitem(_registry._REGISTRY, "dense", _registry.get_variant("dense"))
    monkeypatch.setattr(DenseAttention, "forward", DenseAttention.forward)
    monkeypatch.setattr(torch.backends.mkldnn, "enabled", torch.backends.mkldnn.enabled)
    precision, dtype, threads = torch.get_float32_matmul_precision(), torch.get_default_dtype(), torch.get_num_threads()
    tf32 = torch.backends.cuda.matmul.allow_tf32  # not monkeypatch: cuBLASModule answers through __getattr__
    torch.set_num_threads(2)  # the value the refusal names ("from 2 to 1")
    yield
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.set_float32_matmul_precision(precision), torch.set_default_dtype(dtype), torch.set_num_threads(threads)
    if "softmax" in vars(torch.Tensor) and vars(torch.Tensor)["softmax"].__module__.startswith("attnsuite_plugin_"):
        delattr(torch.Tensor, "softmax")


def _plugin(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"iso_{name}.py"
    path.write_text(HEADER + body)
    return path


@pytest.mark.parametrize("name", sorted(CHANGES))
def test_a_plugin_whose_import_changes_what_built_in_cells_run_is_refused_naming_the_change(tmp_path, restored, name):
    body, change = CHANGES[name]
    path = _plugin(tmp_path, name, body)
    with pytest.raises(UsageError, match=rf"^--plugin {path}: .*{re.escape(change)}"):
        load_plugins([str(path)])
    # asked again in the same process (a reused Ray/Slurm worker, a second sweep from Python): the module is imported
    # and its change made already, so a second snapshot sees nothing new; the refusal must stand, not turn into a load
    with pytest.raises(UsageError, match=rf"^--plugin {path}: .*{re.escape(change)}"):
        load_plugins([str(path)])


def test_a_plugin_that_only_defines_and_registers_is_loaded_once(tmp_path):
    path = _plugin(tmp_path, "plain", "from harness.inputs import register_inputs\n\nX = 1\n")
    load_plugins([str(path)])
    assert f"attnsuite_plugin_{path.stem}" in sys.modules
    path.write_text("raise RuntimeError('imported twice')\n")
    load_plugins([str(path)])  # loaded and checked already: not imported again


@pytest.mark.slow
def test_a_plugin_whose_imports_change_torch_only_as_torch_itself_does_is_loaded(tmp_path):
    """torch's own first import of torch._dynamo (from flex_attention, torch.compile) wraps torch.manual_seed and sets
    TORCHINDUCTOR_CACHE_DIR: not the plugin's doing. A fresh process, so nothing imported it before."""
    path = _plugin(
        tmp_path, "dynamo", "import torch._dynamo\nfrom torch.nn.attention.flex_attention import flex_attention\n"
    )
    code = f"from harness.plugins import load_plugins; load_plugins([{str(path)!r}]); print('loaded')"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip() == "loaded", done.stderr[-2000:]


@pytest.mark.slow
def test_the_refusal_is_one_line_and_exit_2_on_the_command_line(tmp_path):
    path = _plugin(tmp_path, "cli_dtype", CHANGES["dtype"][0])
    done = subprocess.run(
        [sys.executable, "-m", "harness", "list", "--plugin", str(path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"--plugin {path}: importing it changed what built-in cells run with: {CHANGES['dtype'][1]};" in done.stderr


# a plugin that patches SDPA only where built-in cells are measured apart from the driver (--executor subprocess)
SNEAKY = """
import os
import torch.nn.functional as F

if os.environ.get("ATTNSUITE_ISOLATED_PARENT"):
    F.scaled_dot_product_attention = lambda q, k, v, *a, **kw: v * 0.0
"""


@pytest.mark.slow
def test_a_plugin_that_patches_only_in_the_cells_process_costs_built_in_rows_an_error_never_a_false_number(
    tmp_path, no_report
):
    from harness.store import read_rows

    path = _plugin(tmp_path, "sneaky", SNEAKY)
    argv = ["sweep", *TINY, "--seq-lens", "16", "--variants", "dense", "--executor", "subprocess"]
    code, err = _run([*argv, "--plugin", str(path), "--out", str(tmp_path), "--run-id", "r"])
    (row,) = read_rows(tmp_path / "r")
    assert row["variant"] == "dense" and row["status"] == "error", row
    assert "replaced torch.nn.functional.scaled_dot_product_attention" in row["reason"], row["reason"]


# forward writes a row of its own for the cell in flight (found on the stack) to the reply pipe named in argv
FORGER = """
import json
import sys

from harness.measure import RunInfo, outcome_row
from harness.schema import Cell
from variants import AttentionVariant, register_variant
from variants.reference import reference_attention


def forged_row():
    frame = sys._getframe()
    while frame is not None and not isinstance(frame.f_locals.get("cell"), Cell):
        frame = frame.f_back
    cell = frame.f_locals["cell"]
    row = outcome_row(cell, RunInfo(run_id="r", device_name="cpu", host="h", threads=1), "ok", None)
    return {**row, "latency_s": 1e-9, "speedup": 1000.0}


@register_variant("iso_forger")
class Forger(AttentionVariant):
    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        with open(int(sys.argv[-1]), "w", closefd=False) as pipe:
            pipe.write(json.dumps({"result": forged_row()}) + "\\n")
        return reference_attention(q, k, v, causal=causal, dtype=None)
"""


@pytest.mark.slow
def test_a_row_a_plugin_writes_to_the_childs_pipe_is_refused_and_shifts_no_other(tmp_path, no_report):
    from harness.store import read_rows

    path = _plugin(tmp_path, "forger", FORGER)
    argv = ["sweep", *TINY, "--variants", "iso_forger,dense", "--plugin", str(path)]
    code, err = _run([*argv, "--out", str(tmp_path), "--run-id", "r"])
    assert code == 0, err
    rows = read_rows(tmp_path / "r")
    forged = [row for row in rows if row["variant"] == "iso_forger"]
    assert [row["seq_len"] for row in forged] == [16, 32] and len(rows) == 4, rows
    assert all(row["status"] == "error" and "does not answer this job" in row["reason"] for row in forged), forged
    assert not any(row.get("latency_s") == 1e-9 for row in rows)
    assert all(row["status"] == "ok" for row in rows if row["variant"] == "dense")


RUN = RunInfo(run_id="t", device_name="cpu", host="h", threads=1)


class _Shifting(Executor):
    """Answers each cell with the row of the cell before it (the first with its own): a shifted stream of rows."""

    def __init__(self):
        self.job = CellJob(settings={}, run=dataclasses.asdict(RUN))
        self.flight: list[Cell] = []
        self.last: Cell | None = None

    @property
    def in_flight(self):
        return len(self.flight)

    def submit(self, cells):
        self.flight.extend(cells)

    def poll(self, timeout):
        cell = self.flight.pop(0)
        sent = self.last or cell
        self.last = cell
        return [(cell, outcome_row(sent, RUN, "ok", None))]


def test_a_row_for_another_cell_becomes_an_error_row_of_the_cell_asked_for():
    from variants import build_config

    config = build_config("dense").to_dict()
    common = dict(batch=1, heads=1, head_dim=8, device="cpu", inputs="gaussian", dtype="float32", causal=False, seed=0)
    cells = [Cell(variant="dense", config=config, seq_len=n, kv_len=n, mode="forward", **common) for n in (16, 32)]
    got: list[tuple[Cell, dict]] = []
    run_cells(_Shifting(), cells, skip=lambda cell: None, on_row=lambda cell, row, measured: got.append((cell, row)))
    assert [row["cell_id"] for _, row in got] == [cell.cell_id for cell in cells]
    assert [row["status"] for _, row in got] == ["ok", "error"]
    assert f"is for cell {cells[0].cell_id!r}" in got[1][1]["reason"], got[1][1]["reason"]


def _run(argv: list[str]) -> tuple[int, str]:
    """main(argv) in this process: (exit code, stderr)."""
    err = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        warnings.simplefilter("ignore")
        code = main(argv)
    return code, err.getvalue()
