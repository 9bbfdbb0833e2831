"""What a decode row's numbers mean, derived independently of harness.measure.decode: latency_s is seconds per
generated token (not per generation), and flops counts one step's work over the keys it sees (the context plus the
tokens generated so far, itself included), averaged over the generated tokens."""

from __future__ import annotations

import pytest

from harness.measure import timer as timer_module
from tests.harness.measure.test_axes import FAST, D, H, cell, run

STEP_SECONDS = 1e-3  # the fake clock's advance per generated token


def _step_clock(monkeypatch, variant_class) -> list[float]:
    """The timer's clocks (wall and CPU) advance STEP_SECONDS for every decode step of `variant_class` and not
    otherwise; the clock's reading."""
    now = [0.0]

    class FakeTime:
        @staticmethod
        def perf_counter() -> float:
            return now[0]

        thread_time = perf_counter

    step = variant_class.step

    def timed_step(self, *args, **kwargs):
        now[0] += STEP_SECONDS
        return step(self, *args, **kwargs)

    monkeypatch.setattr(timer_module, "time", FakeTime)
    monkeypatch.setattr(variant_class, "step", timed_step)
    return now


@pytest.fixture
def clock(monkeypatch):
    """Steps of dense's KV cache advance the clock."""
    import variants.dense

    return _step_clock(monkeypatch, variants.dense.DenseAttention)


@pytest.mark.parametrize("N", [32, 96])
def test_decode_latency_is_seconds_per_generated_token(clock, N):
    row = run(cell(N=N, phase="decode", causal=True))
    assert row["status"] == "ok", row["reason"]
    assert row["latency_s"] == pytest.approx(STEP_SECONDS, rel=1e-9)  # per token: not S x, not / N
    assert row["latency_p20_s"] == pytest.approx(STEP_SECONDS) and row["latency_p80_s"] == pytest.approx(STEP_SECONDS)
    # the second clock read at the same moments, per token too; a clock whose CPU time keeps up is no contention
    assert row["cpu_latency_s"] == pytest.approx(STEP_SECONDS) and row["contended"] is False


@pytest.mark.parametrize("N, kv_heads", [(32, H), (96, H), (64, 1)])
def test_decode_flops_count_the_keys_each_step_sees(clock, N, kv_heads):
    """Step t (0-based) of S attends to N + t + 1 keys: q.K^T and P.V are 2 x 2 x (N + t + 1) x D FLOPs per query head
    (K/V heads change the bytes, not the FLOPs); the row holds the mean over the S steps, and tflops is that over the
    per-token latency."""
    S = FAST.decode_steps
    row = run(cell(N=N, phase="decode", causal=True, kv_heads=kv_heads))
    assert row["status"] == "ok", row["reason"]
    per_step = [4 * H * D * (N + t + 1) for t in range(S)]  # batch 1
    assert row["flops"] == sum(per_step) // S
    assert row["tflops"] == pytest.approx(row["flops"] / STEP_SECONDS / 1e12, rel=1e-6)


@pytest.fixture
def distilled_clock(monkeypatch):
    """Steps of distilled's running sums advance the clock."""
    import variants.distilled

    return _step_clock(monkeypatch, variants.distilled.DistilledAttention)


def test_a_running_sums_decode_row_counts_its_step_not_a_forward_over_the_context(distilled_clock):
    """distilled's step adds one key to its sums and reads them (features F, 2F of them): per K/V head phi(k_t) 2*D*F
    and phi(k_t) v_t^T 2*2F*D, per query head phi(q_t) 2*D*F and its read 2*2F*D + 2*2F, the same at every N. Under a
    compute peak that a forward of one query over the N + t + 1 keys (the old count, feature map of every key) would
    exceed at this latency, the row is not impossible; its useful flops stay that forward's."""
    from harness.measure import RunInfo, measure_cell

    F, N, S = 16, 256, FAST.decode_steps
    per_step = H * (2 * D * F + 2 * 2 * F * D) + H * (2 * D * F + 2 * 2 * F * D + 2 * 2 * F)  # batch 1, H_kv = H
    phi_and_sums = 2 * D * F + 2 * 2 * F * D  # per key and K/V head: what a forward over every key adds
    old = sum(per_step + H * (N + t) * phi_and_sums for t in range(S)) // S
    peak = 1e9  # FLOP/s: the old count's 1.6e9 per second of STEP_SECONDS would be 158% of it
    assert old / STEP_SECONDS > 1.5 * peak
    limits = {"dtypes": {"float32": {"peak_flops": peak}}}
    info = RunInfo(run_id="test", device_name="cpu", host="h", threads=1, limits=limits)
    config = {"features": F, "chunk": 8, "decode_backend": "eager"}
    row = measure_cell(cell("distilled", N=N, phase="decode", causal=True, config=config), FAST, info).to_dict()
    assert row["status"] == "ok", row["reason"]
    assert row["latency_s"] == pytest.approx(STEP_SECONDS, rel=1e-9)
    assert row["flops"] == per_step  # 12544
    assert row["useful_flops"] == old
    assert not row.get("impossible") and row["pct_of_compute_peak"] == pytest.approx(
        100 * per_step / STEP_SECONDS / peak
    )
    dense = run(cell(N=N, phase="decode", causal=True))
    assert row["flops"] < dense["flops"] == sum(4 * H * D * (N + t + 1) for t in range(S)) // S
