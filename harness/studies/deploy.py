"""The deploy study (`python -m harness deploy`): does each variant survive export to torch.export, ONNX and the browser?

For each variant (its default config, length fields at the longest N, --set overrides; learnable ones with their
initial weights: the graph, not the fit, is checked) on seeded Gaussian q, k, v of one small shape:
- PyTorch eager at each N: the output every target is compared to, its error against float64 exact attention, its
  latency (each target's latency is shown as a ratio to it, timed in the same run);
- `torch.export`: one program, the length dynamic, exported at the first N and run at every N (.pt2 size);
- `onnxruntime`: that program as an ONNX graph (opset harness.studies.deploy_targets.OPSET, weights inline) on CPU;
- `onnxruntime-web`: the same graph in onnxruntime-web's WebAssembly backend under Node (harness.studies.deploy_wasm).
A row per variant, N and target: ok (latency, ratio, max abs error against the PyTorch call, relative L2 against
float64, file size), mismatch (ran, but off the PyTorch call by more than MATCH_TOLERANCE) or unsupported (the
exporter's or runtime's own first message line, and the step that failed). Rows are appended to deploy.jsonl as
each finishes; deploy.csv/.json/.md at the end (harness.studies.results_io).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import Tensor

from harness.report.render import Block, Heading, Paragraph, render_markdown
from harness.safe_files import open_plain, write_plain
from harness.studies import deploy_targets as targets
from harness.studies.deploy_numbers import first_line, target_scores, timed_fields
from harness.report.deploy_table import DEPLOY, deploy_note, deployable_table
from harness.studies.deploy_wasm import WasmUnavailable, run_graph
from harness.studies.results_io import write_table
from harness.studies.selection import variant_fields
from harness.report.study_outcomes import succeeded
from variants import build_variant, reference_attention

STEM = DEPLOY
MEASURED = (  # a row's fields past its variant, shape and target: None where not measured
    *("status", "step", "reason", "runtime", "latency_s", "latency_ratio", "max_abs_error", "rel_l2_error"),
    "file_bytes",
)
RUNTIMES = {  # what ran a target, as rows record it
    "torch.export": lambda: f"torch {torch.__version__}",
    "onnxruntime": lambda: f"onnxruntime {targets.ort_version()} (CPU)",
}


@dataclass(frozen=True, kw_only=True)
class DeployShape:
    batch: int = 1  # B
    heads: int = 4  # H (K/V heads too)
    head_dim: int = 32  # D
    causal: bool = False  # the call exported: causal=True or not


@dataclass(frozen=True)
class Case:
    """One length: the inputs and what PyTorch eager gave on them."""

    seq_len: int
    inputs: tuple[Tensor, Tensor, Tensor]  # q, k, v, (B, H, N, D) float32
    call: np.ndarray  # the eager output
    exact: np.ndarray  # float64 exact attention
    eager_latency_s: float
    eager_rel_l2_error: float  # the eager output's own error against `exact`


def run_deploy(
    variants: list[str],
    seq_lens: list[int],
    *,
    shape: DeployShape,
    overrides: dict[str, dict[str, Any]],
    seed: int,
    wanted: tuple[str, ...],
    folder: Path,
    npm_cache: Path,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Every variant at every length for every target in `wanted`; each row appended to folder/deploy.jsonl as it
    finishes (the file is started afresh), the exported files in folder/deploy/. Returns the rows."""
    (folder / STEM).mkdir(parents=True, exist_ok=True)
    jsonl = folder / f"{STEM}.jsonl"
    write_plain(jsonl, "")
    rows = []
    for name in variants:
        fields = variant_fields(name, max(seq_lens), overrides.get(name))
        for row in _variant_rows(name, fields, seq_lens, shape, seed, wanted, folder / STEM, npm_cache):
            rows.append(row)
            with open_plain(jsonl, "a") as out:
                out.write(json.dumps(row) + "\n")
            log(_log_line(row))
    return rows


def _variant_rows(
    name: str,
    fields: dict[str, Any],
    seq_lens: list[int],
    shape: DeployShape,
    seed: int,
    wanted: tuple[str, ...],
    artifacts: Path,
    npm_cache: Path,
) -> Iterator[dict[str, Any]]:
    """One variant's rows, target by target, each yielded as soon as it is measured."""
    torch.manual_seed(seed)
    base = {"variant": name, "config": fields, "backend": None, **asdict(shape), "export_seq_len": seq_lens[0]}
    try:
        attn = build_variant(name, **fields).eval()
    except (TypeError, ValueError) as exc:  # its config does not fit these lengths (linformer's k > N): say so
        yield from (_refused(base, n, t, "config", f"{type(exc).__name__}: {exc}") for n in seq_lens for t in wanted)
        return
    module = targets.Call(attn, shape.causal)
    base["config"] = attn.config.to_dict()
    try:
        cases = [_case(module, shape, n, seed) for n in seq_lens]
    except Exception as exc:  # the variant refuses (NotSupportedError) or fails this call: every target says why
        yield from (_refused(base, n, t, "eager", first_line(exc)) for n in seq_lens for t in wanted)
        return
    base["backend"] = attn.active_backend(*cases[0].inputs)
    program_rows, onnx_path, onnx_reason = _program(module, cases, base, wanted, artifacts)
    yield from program_rows
    for target in [t for t in wanted if t != "torch.export"]:
        if onnx_path is None:
            yield from (_refused(base, c.seq_len, target, *onnx_reason) for c in cases)
        elif target == "onnxruntime":
            yield from _ort_rows(onnx_path, cases, base)
        else:
            yield from _wasm_rows(onnx_path, cases, base, npm_cache)


def _case(module: targets.Call, shape: DeployShape, n: int, seed: int) -> Case:
    """Seeded q, k, v at length n, the eager call timed, and float64 exact attention on them."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + n) % 2**63)
    q, k, v = (torch.randn(shape.batch, shape.heads, n, shape.head_dim, generator=g) for _ in range(3))
    out, latency = targets.time_call(lambda: module(q, k, v))
    call, exact = out.numpy(), reference_attention(q, k, v, causal=shape.causal).numpy()
    return Case(n, (q, k, v), call, exact, latency, target_scores(call, call, exact)["rel_l2_error"])


def _program(
    module: targets.Call, cases: list[Case], base: dict[str, Any], wanted: tuple[str, ...], artifacts: Path
) -> tuple[list[dict[str, Any]], Path | None, tuple[str, str]]:
    """torch.export's rows (when wanted), the ONNX file made from its program (None when either export failed) and,
    then, the step and reason the ONNX targets carry."""
    try:
        program = targets.export_program(module, cases[0].inputs)
    except Exception as exc:  # every exporter failure is a row: its own first line
        reason = first_line(exc)
        rows = [_refused(base, c.seq_len, "torch.export", "torch.export", reason) for c in cases]
        return (rows if "torch.export" in wanted else []), None, ("torch.export", reason)
    rows = []
    if "torch.export" in wanted:
        size = targets.save_program(program, artifacts / f"{base['variant']}.pt2")
        run = program.module()
        for c in cases:
            rows.append(_timed_row(base, c, "torch.export", size, lambda c=c: run(*c.inputs).numpy()))
    path = artifacts / f"{base['variant']}.onnx"
    try:
        targets.export_onnx(program, path)
    except Exception as exc:  # the ONNX exporter's refusal, in its words
        return rows, None, ("onnx export", first_line(exc))
    return rows, path, ("", "")


def _ort_rows(path: Path, cases: list[Case], base: dict[str, Any]) -> Iterator[dict[str, Any]]:
    try:
        session = targets.ort_session(path)
    except Exception as exc:  # onnxruntime cannot load the graph (an op or opset it lacks)
        yield from (_refused(base, c.seq_len, "onnxruntime", "load", first_line(exc)) for c in cases)
        return
    for c in cases:
        yield _timed_row(base, c, "onnxruntime", path.stat().st_size, targets.ort_call(session, c.inputs))


def _wasm_rows(path: Path, cases: list[Case], base: dict[str, Any], npm_cache: Path) -> Iterator[dict[str, Any]]:
    feeds = [{name: t.numpy() for name, t in zip(targets.INPUTS, c.inputs)} for c in cases]
    try:
        version, results = run_graph(path, feeds, npm_cache, repeats=targets.REPEATS, budget_s=targets.BUDGET_S)
    except WasmUnavailable as exc:
        yield from (_refused(base, c.seq_len, "onnxruntime-web", "setup", str(exc)) for c in cases)
        return
    except Exception as exc:  # the runtime's own first line (an op the wasm build lacks, a failed load)
        yield from (_refused(base, c.seq_len, "onnxruntime-web", "run", first_line(exc)) for c in cases)
        return
    runtime = f"onnxruntime-web {version}"
    for c, (output, latency) in zip(cases, results):
        fields = timed_fields(latency, c.eager_latency_s, target_scores(output, c.call, c.exact))
        yield _row(base, c.seq_len, "onnxruntime-web", c, file_bytes=path.stat().st_size, runtime=runtime, **fields)


def _timed_row(base: dict[str, Any], c: Case, target: str, size: int, call: Callable[[], np.ndarray]) -> dict[str, Any]:
    """A target's row at one length: `call` timed and scored, or unsupported with the runtime's first line."""
    try:
        output, latency = targets.time_call(call)
    except Exception as exc:  # the program or graph refuses this length (a guard, a shape it was fixed to)
        return _refused(base, c.seq_len, target, "run", first_line(exc))
    fields = timed_fields(latency, c.eager_latency_s, target_scores(np.asarray(output), c.call, c.exact))
    return _row(base, c.seq_len, target, c, file_bytes=size, runtime=RUNTIMES[target](), **fields)


def _refused(base: dict[str, Any], seq_len: int, target: str, step: str, reason: str) -> dict[str, Any]:
    """An unsupported row: the step that failed and its own first message line."""
    return _row(base, seq_len, target, None, status="unsupported", step=step, reason=reason)


def _row(base: dict[str, Any], seq_len: int, target: str, case: Case | None, **fields: Any) -> dict[str, Any]:
    """A row with every field (None where not measured): the variant and shape, the target, eager's numbers."""
    row: dict[str, Any] = {**base, "seq_len": seq_len, "target": target}
    row["opset"] = None if target == "torch.export" else targets.OPSET
    row.update(dict.fromkeys(MEASURED))
    row["eager_latency_s"] = None if case is None else case.eager_latency_s
    row["eager_rel_l2_error"] = None if case is None else case.eager_rel_l2_error
    row.update(fields)
    return row


def _log_line(row: dict[str, Any]) -> str:
    what = (
        row["reason"]
        if not succeeded(row)
        else f"{row['latency_ratio']:.2f}x eager, max abs {row['max_abs_error']:.1e}"
    )
    return f"{row['variant']:<16} N={row['seq_len']:<6} {row['target']:<16} {row['status']}: {what}"


def write_deploy(folder: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> list[Path]:
    """deploy.csv and deploy.json (rows and meta; what the report reads) and deploy.md (the Deployable? table)."""
    paths = write_table(folder, STEM, rows, meta)
    summary: list[Block] = [Heading(1, "Deployable?"), Paragraph(deploy_note(meta)), deployable_table(rows)]
    md_path = folder / f"{STEM}.md"
    write_plain(md_path, render_markdown(summary))
    return paths + [md_path]
