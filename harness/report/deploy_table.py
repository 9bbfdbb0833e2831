"""The deploy study's "Deployable?" table, variant x target, in deploy.md and in a run's report (study_results).

A cell sums up a target over the lengths run: 'ok' with the latency as a ratio to PyTorch eager (the range over the
lengths), the worst max abs error against the PyTorch call, the worst relative L2 against float64 and the file size;
or the first failure, its step and the exporter's or runtime's own words; both when it fails at some lengths only.
"""

from __future__ import annotations

from typing import Any

from harness.report.render import Table, format_bytes, format_error, format_n, format_ratio, short_reason
from harness.store import COL
from harness.report.study_outcomes import succeeded

DEPLOY = "deploy"  # the file stem harness.studies.deploy writes
TARGETS = ("torch.export", "onnxruntime", "onnxruntime-web")  # in the order they are tried (each needs the one before)
REASON_WIDTH = 130  # characters of a refusal kept in a cell
WHAT = (
    "Each variant exported with a dynamic sequence length by torch.export, then as one ONNX graph (weights inline) "
    "run by onnxruntime on CPU and by onnxruntime-web's WebAssembly backend under Node (`python -m harness deploy`). "
    "ok: ran at every length, latency as a ratio to PyTorch eager in the same run, max abs error against the PyTorch "
    "call, relative L2 against float64 exact attention, file size; otherwise the step that failed and its own words."
)


def deployable_table(rows: list[dict[str, Any]]) -> Table:
    """One line per variant (with its backend), one column per target that has rows."""
    present = [t for t in TARGETS if any(r.get("target") == t for r in rows)]
    body = []
    for variant in dict.fromkeys(str(r.get("variant")) for r in rows):
        mine = [r for r in rows if str(r.get("variant")) == variant]
        backend = next((r["backend"] for r in mine if r.get("backend")), None)
        label = f"{variant} ({backend})" if backend and backend != "default" else variant
        cells = [target_cell([r for r in mine if r.get("target") == t]) for t in present]
        body.append([label] + [_shared_failure(cells, i) for i in range(len(cells))])
    return Table(["variant", *present], body)


def target_cell(rows: list[dict[str, Any]]) -> str:
    """One variant's rows for one target as a cell: the ok summary, the first failure, or both."""
    if not rows:
        return "-"
    ok = [r for r in rows if succeeded(r)]
    failed = [r for r in rows if not succeeded(r)]
    parts = []
    if ok:
        parts.append(ok_summary(ok) + ("" if not failed else f" at {_lengths(ok)}"))
    if failed:
        first = failed[0]
        step = f" ({first['step']})" if first.get("step") else ""
        where = "" if not ok else f" at {_lengths(failed)}"
        parts.append(f"{first.get('status')}{step}{where}: {short_reason(first.get('reason'), REASON_WIDTH)}")
    return "; ".join(parts)


def ok_summary(rows: list[dict[str, Any]]) -> str:
    """'ok 0.8-1.3x, err 3.0e-07, L2 2.1e-07, 13 KiB': latency ratios over the lengths, worst errors, the file."""
    ratios = sorted(r["latency_ratio"] for r in rows if r.get("latency_ratio") is not None)
    if not ratios:
        speed = "-"
    elif len(ratios) == 1 or format_ratio(ratios[0]) == format_ratio(ratios[-1]):
        speed = format_ratio(ratios[0])
    else:
        speed = f"{format_ratio(ratios[0])[:-1]}-{format_ratio(ratios[-1])}"
    worst_abs = max((r["max_abs_error"] for r in rows if r.get("max_abs_error") is not None), default=None)
    worst_l2 = max((r["rel_l2_error"] for r in rows if r.get("rel_l2_error") is not None), default=None)
    size = format_bytes(rows[0].get("file_bytes"))
    return f"ok {speed}, err {format_error(worst_abs)}, L2 {format_error(worst_l2)}, {size}"


def deploy_caveat(rows: list[dict[str, Any]]) -> str | None:
    """The recommendation's sentence: the variants some target refuses (at every length), with the step; else None."""
    refused: dict[str, dict[str, str]] = {}  # variant -> {target: the step that failed}
    for variant in dict.fromkeys(str(r.get("variant")) for r in rows):
        for target in TARGETS:
            mine = [r for r in rows if str(r.get("variant")) == variant and r.get("target") == target]
            if mine and not any(succeeded(r) for r in mine):
                refused.setdefault(variant, {})[target] = str(mine[0].get("step") or mine[0].get(COL.status))
    if not refused:
        return None
    parts = "; ".join(
        f"{v} ({', '.join(steps)}: fails at {' / '.join(dict.fromkeys(steps.values()))})"
        for v, steps in refused.items()
    )
    return (
        f"**Deployable?** Refused at every length by some target (deploy): {parts}; reasons in the Deployable? table."
    )


def deploy_note(meta: dict[str, Any]) -> str:
    """What deploy.md's table measured: the shape, lengths, opset and the runtimes' versions."""
    shape = meta.get("shape", {})
    lengths = ", ".join(format_n(n) for n in meta.get("seq_lens", []))
    return (
        f"{WHAT} Inputs: seeded Gaussian q, k, v of B={shape.get('batch')}, H={shape.get('heads')}, "
        f"D={shape.get('head_dim')}, causal={shape.get('causal')}, at N = {lengths} (exported at the first). ONNX "
        f"opset {meta.get('opset')}; {', '.join(meta.get('runtimes', []))}; torch threads {meta.get('torch_threads')}."
    )


def _shared_failure(cells: list[str], i: int) -> str:
    """cells[i], or 'same as <the column to its left>' when it repeats that column's failure (a step both share)."""
    if i and cells[i] == cells[i - 1] and not cells[i].startswith("ok"):
        return "same as the column to its left"
    return cells[i]


def _lengths(rows: list[dict[str, Any]]) -> str:
    return "N=" + ",".join(format_n(r.get("seq_len")) for r in rows)
