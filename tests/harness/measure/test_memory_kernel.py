"""The xformers operator a call ran, from the profiler's op names (the lists are what xformers 0.0.35 and torch run)."""

from __future__ import annotations

import pytest

from harness.measure.memory import sdpa_kernel, xformers_op

SDPA_FLASH = ["aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention"]
SDPA_FLASH += ["aten::_flash_attention_forward"]  # SDPA's flash calls torch's flash kernel by name too
SDPA_EFFICIENT = ["aten::_scaled_dot_product_efficient_attention", "aten::_efficient_attention_forward"]


@pytest.mark.parametrize(
    "ops,want",
    [
        (["xformers_flash3::flash_fwd", "aten::empty"], "fa3F"),  # the flash_attn_3 package's Hopper kernel
        (["xformers_flash::flash_fwd", "aten::_flash_attention_forward"], "fa2F-pt"),  # no flash-attn: torch's kernel
        (["xformers_flash::flash_fwd", "aten::empty_like"], "fa2F"),  # the flash-attn package's kernel
        (["aten::_efficient_attention_forward", "aten::transpose"], "cutlassF-pt"),  # cutlass calls torch's by name
        (SDPA_FLASH, None),  # SDPA is not xformers, though it runs the same kernel
        (SDPA_EFFICIENT, None),
        (["aten::bmm", "aten::softmax"], None),
    ],
)
def test_xformers_op_names_the_operator_that_ran(ops, want):
    assert xformers_op(ops) == want


def test_sdpa_and_xformers_on_the_same_torch_kernel_are_told_apart():
    """The case the record is for: both ran torch's flash kernel; the row says so for each."""
    xformers = ["xformers_flash::flash_fwd", "aten::_flash_attention_forward"]
    assert (sdpa_kernel(xformers), xformers_op(xformers)) == (None, "fa2F-pt")
    assert (sdpa_kernel(SDPA_FLASH), xformers_op(SDPA_FLASH)) == ("flash", None)


@pytest.mark.cuda
def test_cuda_rows_record_the_xformers_operator_and_sdpa_its_kernel():
    pytest.importorskip("xformers")
    import torch

    from harness.measure.memory import memory_and_kernel
    from variants import build_variant

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 4, 1024, 128, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
    fields = {}
    for backend in ("xformers", "sdpa"):
        attn = build_variant("dense", backend=backend)

        def step(attn=attn):
            with torch.no_grad():
                return attn(q, k, v, causal=True)

        fields[backend] = memory_and_kernel(lambda step=step: step, torch.device("cuda"))
    assert fields["xformers"].xformers_op in ("fa3F", "fa2F", "fa2F-pt", "cutlassF-pt")
    assert fields["xformers"].sdpa_kernel is None
    assert fields["sdpa"].xformers_op is None and fields["sdpa"].sdpa_kernel in ("flash", "efficient", "cudnn")
