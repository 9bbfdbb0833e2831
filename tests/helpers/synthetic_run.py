"""Synthetic run folders for the report and compare tests: rows with known scaling laws, no device.

Latency and memory follow exact power laws (dense N^2, the efficient variants N^1), so tests can
check the fitted exponents and crossovers against the numbers planted here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LENGTHS = (256, 512, 1024, 2048, 4096, 8192)
# variant -> (config, time coefficient, time exponent, memory coefficient, memory exponent, rel error)
LAWS: dict[str, tuple[dict, float, float, float, float, float]] = {
    "dense": ({"backend": "auto"}, 1e-9, 2.0, 8.0, 2.0, 1e-7),
    "chunked": ({"chunk_size": 256}, 1.5e-9, 2.0, 4096.0, 1.0, 2e-7),
    "sliding_window": ({"backend": "auto", "window": 128}, 4e-7, 1.0, 2048.0, 1.0, 0.3),
    "linformer": ({"k": 128}, 2e-7, 1.0, 1024.0, 1.0, 0.05),
}
DENSE_OOM_AT = 8192  # dense runs out of memory here
SPREAD = 0.02  # p20/p80 at -/+ 2% of the median


def make_rows(
    *,
    variants: tuple[str, ...] = tuple(LAWS),
    lengths: tuple[int, ...] = LENGTHS,
    modes: tuple[str, ...] = ("forward",),
    inputs: tuple[str, ...] = ("gaussian", "local"),
    run_id: str = "synthetic",
    device_name: str = "Synthetic CPU",
    slow: dict[str, float] | None = None,
    with_failures: bool = True,
) -> list[dict[str, Any]]:
    """Rows of a synthetic run. `slow` multiplies a variant's latency (to plant a regression)."""
    rows = []
    for mode in modes:
        for dist in inputs:
            for variant in variants:
                config, tc, tp, mc, mp, err = LAWS[variant]
                for n in lengths:
                    t = tc * n**tp * (slow or {}).get(variant, 1.0) * (3.5 if mode == "train" else 1.0)
                    row = _row(run_id, variant, config, n, mode, dist, device_name)
                    if with_failures and variant == "dense" and n >= DENSE_OOM_AT:
                        row.update(status="oom", reason="CUDA out of memory. Tried to allocate 2.00 GiB")
                    elif with_failures and variant == "linformer" and mode == "train" and n == lengths[-1]:
                        row.update(status="error", reason="RuntimeError: planted failure")
                    else:
                        row.update(
                            status="ok",
                            latency_s=t,
                            latency_p20_s=t * (1 - SPREAD),
                            latency_p80_s=t * (1 + SPREAD),
                            repeats=10,
                            peak_memory_bytes=int(mc * n**mp),
                            memory_method="synthetic",
                            flops=4 * n * n * 64,
                            tflops=4 * n * n * 64 / t / 1e12,
                            bytes_moved=4 * n * 64 * 4,
                            rel_l2_error=err,
                            max_abs_error=err * 3,
                            cosine=1 - err,
                            error_rows=64,
                        )
                    rows.append(row)
    if with_failures:
        unsupported = _row(run_id, "linformer", LAWS["linformer"][0], lengths[0], modes[0], inputs[0], device_name)
        unsupported.update(causal=True, status="unsupported", reason="does not support causal=True")
        rows.append(unsupported)
    return rows


def _row(run_id: str, variant: str, config: dict, n: int, mode: str, dist: str, device_name: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "cell_id": f"{variant}-{n}-{mode}-{dist}",
        "variant": variant,
        "config": dict(config),
        "backend": config.get("backend", "default").replace("auto", "sdpa"),
        "seq_len": n,
        "kv_len": n,
        "batch": 1,
        "heads": 8,
        "head_dim": 64,
        "dtype": "float32",
        "device": "cpu",
        "device_name": device_name,
        "host": "synth",
        "causal": False,
        "mode": mode,
        "inputs": dist,
        "seed": 0,
        "threads": 2,
        "status": None,
        "reason": None,
        "latency_s": None,
        "latency_p20_s": None,
        "latency_p80_s": None,
        "peak_memory_bytes": None,
        "rel_l2_error": None,
        "schema_version": 1,
    }


BUDGET_SPEC = 'variants = ["dense", "chunked", "sliding_window", "linformer"]\nerror_budgets = [0.05, 0.1]\nerror_metric = "rel_l2"\n'
BUDGET_LENGTHS = (1024, 2048, 4096, 8192)
UNREACHABLE = (
    "relative L2 error 0.31 at k 1024, the largest declared (searched 64-1024 on calibration seeds), "
    "is above the budget 0.05"
)


def make_budget_rows(
    *, inputs: tuple[str, ...] = ("local",), lengths: tuple[int, ...] = BUDGET_LENGTHS
) -> list[dict[str, Any]]:
    """Rows of a run with error budgets 0.05 and 0.1 (BUDGET_SPEC), every timed row with a paired speed-up interval.

    dense and chunked (0.9x, slower) are exact; sliding_window was matched to each budget (window 512 at 0.05, error
    0.04; window 256 at 0.1, error 0.09), its speed-up N/1024 x 1.05 (x 1.6 at 0.1) within +/- 10%, so at N=1024 the
    0.05 interval overlaps 1 (dense wins); linformer found no k for 0.05 (unreachable) and k=256 for 0.1 with error
    0.105 (within the 10% margin), 2x faster than sliding_window@0.1 with overlapping intervals at N=8192 only.
    """
    rows = []
    for dist in inputs:
        for n in lengths:
            dense_t = 1e-9 * n**2
            plan = [
                ("dense", {"backend": "auto"}, None, 1e-7, 1.0, None),
                ("chunked", {"chunk_size": 256}, None, 2e-7, 0.9, (0.85, 0.95)),
            ]
            scale = n / 1024
            plan += [
                ("sliding_window", {"backend": "auto", "window": 512}, 0.05, 0.04, 1.05 * scale, (0.9, 1.1)),
                ("sliding_window", {"backend": "auto", "window": 256}, 0.1, 0.09, 1.6 * scale, (0.9, 1.1)),
            ]
            spread = (0.5, 1.5) if n == lengths[-1] else (0.98, 1.02)  # linformer's interval at the largest N is wide
            plan += [("linformer", {"k": 256}, 0.1, 0.105, 3.2 * scale, spread)]
            for variant, config, budget, err, speedup, interval in plan:
                row = _row("budgets", variant, config, n, "forward", dist, "Synthetic CPU")
                row["cell_id"] += f"-{budget}"
                t = dense_t / speedup
                row.update(
                    status="ok",
                    latency_s=t,
                    latency_p20_s=t * 0.98,
                    latency_p80_s=t * 1.02,
                    repeats=10,
                    peak_memory_bytes=1024 * n,
                    rel_l2_error=err,
                    cosine=1 - err,
                    error_rows=64,
                    load_per_cpu=0.1,
                    matched_budget=budget,
                    error_metric="rel_l2" if budget else None,
                    tuning_s=2.0 if budget else None,
                )
                if interval:
                    row.update(speedup=speedup, speedup_low=speedup * interval[0], speedup_high=speedup * interval[1])
                rows.append(row)
            unreachable = _row("budgets", "linformer", {"k": 1024}, n, "forward", dist, "Synthetic CPU")
            unreachable.update(
                cell_id=unreachable["cell_id"] + "-0.05",
                status="unreachable",
                reason=UNREACHABLE,
                matched_budget=0.05,
                error_metric="rel_l2",
                tuning_s=5.0,
                tuning={"knob": "k", "low": 64, "high": 1024, "tried": {"1024": 0.31 + n / 1e6}},
            )
            rows.append(unreachable)
    return rows


def write_run(
    folder: Path,
    rows: list[dict[str, Any]] | None = None,
    *,
    truncate_last: bool = False,
    spec_text: str = 'variants = ["dense", "chunked"]\nseq_lens = [256, 512]\n',
    **kwargs,
) -> Path:
    """Write a run folder (rows.jsonl, env.json, spec.toml) and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = make_rows(**kwargs) if rows is None else rows
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if truncate_last:
        text += json.dumps(rows[-1])[:25]  # a killed run: half a line, no newline
    (folder / "rows.jsonl").write_text(text)
    env = {
        "python": "3.11",
        "torch": "2.13.0",
        "cuda": None,
        "gpu": None,
        "cpu": "Synthetic CPU",
        "cpu_count": 2,
        "torch_threads": 2,
        "git_commit": "abc123",
        "host": "synth",
        "packages": {},
        "limits": {"dtypes": {"float32": {"peak_flops": 1e11, "bandwidth_bytes_per_s": 2e10, "method": "synthetic"}}},
    }
    (folder / "env.json").write_text(json.dumps(env))
    (folder / "spec.toml").write_text(spec_text)
    return folder


def analysed_rows(
    rows: list[dict[str, Any]],
    spec_text: str | None = None,
    budgets: tuple[float, ...] | None = None,
    clock: str | None = None,
):
    """Rows analysed as a run folder's would be (harness.report.analysed), without writing the folder."""
    import warnings

    from harness.report.analysed import analyse
    from harness.store import Run, rows_frame

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = rows_frame(rows)
    run = Run(path=Path("synthetic"), rows=frame, env={}, spec_text=spec_text, records=rows)
    return analyse(run, budgets=budgets, clock=clock)


def blank_row(**fields: Any) -> dict[str, Any]:
    """A row with every schema column None but those given (schema_version set): what a test writes or reads."""
    from harness.row import ROW_FIELDS
    from harness.schema import SCHEMA_VERSION

    return {**dict.fromkeys(ROW_FIELDS), "schema_version": SCHEMA_VERSION, **fields}


def timed_row(**fields: Any) -> "Row":
    """A typed Row of a small dense cell with the given row fields (what harness.measure.roofline judges)."""
    from harness.row import Row
    from harness.schema import Cell

    values = dict(seq_len=64, kv_len=64, batch=1, heads=2, inputs="gaussian", head_dim=8, seed=0, device="cpu")
    cell = Cell(variant="dense", config={}, dtype="float32", causal=False, mode="forward", **values)
    return Row(cell=cell, **fields)
