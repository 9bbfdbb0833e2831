"""The deploy study's exports and CPU runs: torch.export with a dynamic length, the ONNX graph, onnxruntime on CPU.

- `Call`: the variant as a module of (q, k, v) alone, causal fixed, what both exporters trace.
- `export_program`: torch.export with the sequence length of q, k and v one dynamic dimension, so the program must run
  at every length asked (the study runs it at two or more).
- `export_onnx`: that program through torch.onnx.export(dynamo=True) at opset OPSET, weights inline (one file: the
  browser cannot load external data).
- `ort_session`: onnxruntime's CPU provider at torch's thread count.
- `time_call`: the harness's one timer (harness.measure.timer) around a call, median seconds.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor, nn

from harness.measure.timer import StepTimer, Stopwatch
from harness.safe_files import write_saved

OPSET = 18  # the ONNX opset asked of the exporter: onnxruntime (CPU, web) runs it; torch's default is newer
INPUTS = ("q", "k", "v")  # the graph's input names, in order
BUDGET_S = 0.2  # timing budget per target and length (the one timer's blocked autorange)
REPEATS = 5  # timed calls at least


class Call(nn.Module):
    """`attn(q, k, v, causal=causal)` as a module of three tensors: what torch.export and ONNX take."""

    def __init__(self, attn: nn.Module, causal: bool):
        super().__init__()
        self.attn = attn
        self.causal = causal

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return self.attn(q, k, v, causal=self.causal)


def export_program(module: Call, example: tuple[Tensor, ...]) -> torch.export.ExportedProgram:
    """torch.export of `module` at `example`, the length (dim 2) of q, k and v dynamic: one program for every N."""
    length = torch.export.Dim.DYNAMIC
    with torch.no_grad():
        return torch.export.export(module, example, dynamic_shapes={name: {2: length} for name in INPUTS})


def save_program(program: torch.export.ExportedProgram, path: Path) -> int:
    """The program saved as a .pt2 file (torch.export.save, never through a link); returns its size in bytes."""
    write_saved(path, lambda made: torch.export.save(program, made))
    return path.stat().st_size


def export_onnx(program: torch.export.ExportedProgram, path: Path) -> int:
    """The program as one ONNX file at OPSET with its weights inline; returns its size in bytes."""
    onnx_program = torch.onnx.export(program, dynamo=True, opset_version=OPSET, external_data=False, verbose=False)
    write_saved(path, lambda made: onnx_program.save(made, external_data=False))
    return path.stat().st_size


def ort_session(path: Path) -> Any:
    """An onnxruntime InferenceSession on the CPU provider, at torch's intra-op thread count, warnings off."""
    import onnxruntime  # optional: the `deploy` extra

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.log_severity_level = 3  # errors only: its CPU-vendor notice is not ours to show
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def ort_version() -> str:
    import onnxruntime  # optional: the `deploy` extra

    return onnxruntime.__version__


def ort_call(session: Any, inputs: tuple[Tensor, ...]) -> Callable[[], np.ndarray]:
    """A call of the session at `inputs` (q, k, v), its first output as numpy."""
    feeds = {name: tensor.numpy() for name, tensor in zip(INPUTS, inputs)}
    return lambda: session.run(None, feeds)[0]


def time_call(call: Callable[[], Any]) -> tuple[Any, float]:
    """(the call's result, median seconds per call) by the one timer, one untimed first call before."""
    with torch.no_grad():
        with Stopwatch() as first:
            result = call()
        measured = StepTimer("cpu").measure(call, budget_s=BUDGET_S, repeats=REPEATS, first_call_s=first.seconds)
    return result, measured.latency_fields()["latency_s"]


def missing_extra_reason() -> str | None:
    """Why the ONNX targets cannot run here (the `deploy` extra not installed), or None."""
    missing = [m for m in ("onnx", "onnxruntime", "onnxscript") if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return f"{', '.join(missing)} not installed: pip install 'attnsuite[deploy]' (onnx, onnxruntime, onnxscript)"
