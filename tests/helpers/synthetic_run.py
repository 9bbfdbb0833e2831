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
                            status="ok", latency_s=t, latency_p20_s=t * (1 - SPREAD), latency_p80_s=t * (1 + SPREAD),
                            repeats=10, peak_memory_bytes=int(mc * n**mp), memory_method="synthetic",
                            flops=4 * n * n * 64, tflops=4 * n * n * 64 / t / 1e12, rel_l2_error=err,
                            max_abs_error=err * 3, cosine=1 - err, error_rows=64,
                        )
                    rows.append(row)
    if with_failures:
        unsupported = _row(run_id, "linformer", LAWS["linformer"][0], lengths[0], modes[0], inputs[0], device_name)
        unsupported.update(causal=True, status="unsupported", reason="does not support causal=True")
        rows.append(unsupported)
    return rows


def _row(run_id: str, variant: str, config: dict, n: int, mode: str, dist: str, device_name: str) -> dict[str, Any]:
    return {
        "run_id": run_id, "cell_id": f"{variant}-{n}-{mode}-{dist}", "variant": variant, "config": dict(config),
        "backend": config.get("backend", "default").replace("auto", "sdpa"), "seq_len": n, "kv_len": n, "batch": 1,
        "heads": 8, "head_dim": 64, "dtype": "float32", "device": "cpu", "device_name": device_name, "host": "synth",
        "causal": False, "mode": mode, "inputs": dist, "seed": 0, "threads": 2, "status": None, "reason": None,
        "latency_s": None, "latency_p20_s": None, "latency_p80_s": None, "peak_memory_bytes": None,
        "rel_l2_error": None, "schema_version": 1,
    }


def write_run(folder: Path, rows: list[dict[str, Any]] | None = None, *, truncate_last: bool = False, **kwargs) -> Path:
    """Write a run folder (rows.jsonl, env.json, spec.toml) and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = make_rows(**kwargs) if rows is None else rows
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if truncate_last:
        text += json.dumps(rows[-1])[:25]  # a killed run: half a line, no newline
    (folder / "rows.jsonl").write_text(text)
    env = {"python": "3.11", "torch": "2.13.0", "cuda": None, "gpu": None, "cpu": "Synthetic CPU", "cpu_count": 2,
           "torch_threads": 2, "git_commit": "abc123", "host": "synth", "packages": {}}
    (folder / "env.json").write_text(json.dumps(env))
    (folder / "spec.toml").write_text('variants = ["dense", "chunked"]\nseq_lens = [256, 512]\n')
    return folder
