"""compare --fail-on-regression on real sweeps with a planted quantity: a plugin that does dense's call plus 0.3x of it
again (the same SDPA over 30% of the query rows, counted in its FLOPs) is a regression against the same plugin
without the extra work; two runs without it are not. Small (one N, a short time budget), real, and skipped on a
machine too busy to time anything (before or while the sweeps run)."""

from __future__ import annotations

import pytest

from harness.commands import main
from harness.measure.noise import HIGH_LOAD_PER_CPU, load_per_cpu
from harness.report.analysed import analyse
from harness.report.verdicts import load_notes, under_load

PLUGIN = '''
from dataclasses import dataclass

import torch.nn.functional as F

from variants import AttentionVariant, Capabilities, VariantConfig, dense_flops, register_variant

EXTRA = {extra}  # share of dense's work done again: SDPA over this share of the query rows


@dataclass(frozen=True, kw_only=True)
class DensePlusConfig(VariantConfig):
    pass


@register_variant("dense_plus", config=DensePlusConfig)
class DensePlus(AttentionVariant):
    """Dense attention (torch SDPA) plus EXTRA of its own work again."""

    capabilities = Capabilities(exact=True, causal=False, kv_mask=False)

    def forward(self, q, k, v, *, causal=False, kv_mask=None):  # (B, H, N, D)
        extra_rows = round(EXTRA * q.shape[-2])
        if extra_rows:
            F.scaled_dot_product_attention(q[..., :extra_rows, :], k, v)  # (B, H, extra_rows, D), discarded
        return F.scaled_dot_product_attention(q, k, v)

    def flops(self, B, H, N, M, D, causal, *, H_kv=None):
        return dense_flops(B, H, N + round(EXTRA * N), M, D, causal)
'''
SLOWER = 1.3  # the planted extra work over dense's own


def _sweep(folder, name: str, extra: float) -> str:
    plugin = folder / f"plugin_{name}" / "dense_plus.py"
    plugin.parent.mkdir(parents=True)
    plugin.write_text(PLUGIN.format(extra=extra))
    args = ["sweep", "--variants", "dense,dense_plus", "--plugin", str(plugin), "--seq-lens", "512"]
    args += ["--inputs", "gaussian", "--error-budgets", "", "--time-budget", "0.5", "--quiet"]
    args += ["--processes", "4", "--causals", "false"]  # the CPU default's processes; the plugin is non-causal
    args += ["--out", str(folder), "--run-id", name]
    assert main(args) == 0
    return str(folder / name)


@pytest.mark.slow
def test_a_planted_slowdown_is_a_regression_and_a_rerun_is_not(tmp_path, capsys):
    load = load_per_cpu()
    if load is not None and load >= HIGH_LOAD_PER_CPU:
        pytest.skip(f"the machine is busy (other processes' load {load:.2f} per CPU >= {HIGH_LOAD_PER_CPU})")
    plain, again, slower = (_sweep(tmp_path, n, e) for n, e in (("a", 0.0), ("a2", 0.0), ("b", SLOWER - 1)))
    for run in (plain, again, slower):  # the load may have come while they ran: compare would (rightly) not judge
        analysed = analyse(run)  # compare's own rules: a run under load, or one whose rows are mostly noisy
        loaded = under_load(analysed) or "; ".join(load_notes(analysed))
        if loaded:
            pytest.skip(f"run {run} was measured under load ({loaded})")
    capsys.readouterr()
    assert main(["compare", plain, again, "--fail-on-regression", "--out", str(tmp_path / "same")]) == 0
    assert main(["compare", plain, slower, "--fail-on-regression", "--out", str(tmp_path / "worse")]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION  dense_plus" in out and "against dense in the cell" in out, out
    assert "REGRESSION  dense " not in out, out  # dense itself, against the reference kernel, did not move
