"""Checks run once per cell, before timing: the timed calls run the variant's forward with no check_qkv, no
not_supported_reasons and no backend resolution inside them (on a GPU at small N, that Python would be the latency).

Counted, never timed: each cell is measured twice with a different number of timed calls; the checks' call counts
must not change with it, while the forward's do.
"""

from __future__ import annotations

import collections
import functools

import pytest
import torch

from harness.measure import MeasureContext, MeasureSettings, RunInfo, measure_cell
from harness.schema import Cell

RUN = RunInfo(run_id="test", device_name="cpu", host="h", threads=torch.get_num_threads())
CHECKS = ("check_qkv", "not_supported_reasons", "resolve_backend")


def counting(monkeypatch) -> collections.Counter:
    """Count calls of check_qkv (as the variant's call sees it), not_supported_reasons, every resolve_backend and
    every forward of the built-in variants."""
    import variants.base as base
    from variants import get_variant, list_variants

    counts: collections.Counter = collections.Counter()

    def counted(name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(base, "check_qkv", counted("check_qkv", base.check_qkv))
    classes = {base.AttentionVariant} | {get_variant(name).cls for name in list_variants()}
    for cls in classes:
        for method in ("not_supported_reasons", "resolve_backend", "forward"):
            if method in vars(cls):
                monkeypatch.setattr(cls, method, counted(method, vars(cls)[method]))
    return counts


def cell(variant: str, mode: str, scope: str) -> Cell:
    from variants import build_config

    return Cell(
        variant=variant,
        config=build_config(variant).to_dict(),
        seq_len=32,
        kv_len=32,
        batch=1,
        heads=2,
        head_dim=8,
        dtype="float32",
        device="cpu",
        causal=False,
        mode=mode,
        scope=scope,
        inputs="gaussian",
        seed=0,
    )


@pytest.mark.parametrize("mode", ["forward", "train"])
@pytest.mark.parametrize("variant,scope", [("dense", "attention"), ("sliding_window", "attention"), ("dense", "layer")])
def test_the_checks_run_once_per_cell_however_many_calls_are_timed(monkeypatch, variant, scope, mode):
    import harness.measure.pairing as pairing

    counts = counting(monkeypatch)
    seen = {}
    for timed_calls in (2, 12):
        # A budget every call exceeds: layer cells make `repeats` timed calls, paired cells (sliding_window against dense,
        # and dense against the reference kernel) SLOW_PAIRS pairs of one call each.
        monkeypatch.setattr(pairing, "SLOW_PAIRS", timed_calls)
        # one call per block (a slow pair's faster step would fill the slower's call: dense at N=32 against the
        # reference kernel makes dozens), so the timed calls are the count the test sets
        monkeypatch.setattr(pairing, "calls_per_block", lambda call_s, block_s: 1)
        settings = MeasureSettings(time_budget_s=1e-9, repeats=timed_calls, error_rows=8, cell_timeout_s=None)
        counts.clear()
        row = measure_cell(cell(variant, mode, scope), settings, RUN, MeasureContext())
        assert row.status == "ok", row.reason
        assert row.repeats == timed_calls
        seen[timed_calls] = dict(counts)
    few, many = seen[2], seen[12]
    assert many["forward"] >= few["forward"] + 10, seen  # the timed calls did run the forward...
    assert {c: many.get(c, 0) for c in CHECKS} == {c: few.get(c, 0) for c in CHECKS}, seen  # ...and no check with it
