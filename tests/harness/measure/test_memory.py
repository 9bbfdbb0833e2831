"""The CPU peak-memory measurement against calls that allocate a known number of bytes."""

import pytest
import torch

from harness.measure.memory import measure_peak_memory

MiB = 1 << 20


def test_cpu_peak_counts_a_known_allocation():
    peak = measure_peak_memory(lambda: torch.empty(8 * MiB, dtype=torch.uint8), "cpu")
    assert peak.method == "cpu_profiler_events"
    assert 8 * MiB <= peak.bytes < 8 * MiB + 64 * 1024
    assert peak.result.numel() == 8 * MiB


def test_cpu_peak_is_the_maximum_not_the_sum():
    def step():
        a = torch.empty(4 * MiB, dtype=torch.uint8)
        del a
        b = torch.empty(6 * MiB, dtype=torch.uint8)
        del b
        return torch.empty(1 * MiB, dtype=torch.uint8)

    peak = measure_peak_memory(step, "cpu")
    assert 6 * MiB <= peak.bytes < 7 * MiB


def test_memory_live_before_the_call_is_not_counted():
    existing = torch.ones(4 * MiB, dtype=torch.float32)  # 16 MiB, live before the call
    peak = measure_peak_memory(lambda: existing.mul_(2), "cpu")  # in place: nothing new
    assert peak.bytes < MiB


def test_unknown_device_is_refused():
    with pytest.raises(ValueError, match="'cpu' or 'cuda'"):
        measure_peak_memory(lambda: None, "meta")


@pytest.mark.cuda
def test_cuda_peak_counts_a_known_allocation():
    peak = measure_peak_memory(lambda: torch.empty(8 * MiB, dtype=torch.uint8, device="cuda"), "cuda")
    assert 8 * MiB <= peak.bytes < 9 * MiB
