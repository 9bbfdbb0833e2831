"""flex's compilation: one compiled graph per shape family, a recompile past the family's limit an error, and an
uncompiled (eager, O(N^2)) flex call an error row, never a number. pyproject's filterwarnings makes flex's own
"called without torch.compile" warning an error in every test as well."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from harness.measure import MeasureSettings, RunInfo, measure_cell
from harness.schema import Cell
from variants import _sliding_kernels
from variants._sliding_kernels import FlexNotCompiledError, flex


def _qkv(n: int, *, kv_heads: int = 2):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, h, n, 16, generator=g) for h in (2, kv_heads, kv_heads)]


def test_flex_on_cpu_serves_every_length_of_a_family_from_one_dynamic_graph(monkeypatch):
    """Lengths alternating: one family; its graphs (at most the dynamic limit) are reused, not compiled again."""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(_sliding_kernels, "_FLEX_FAMILIES", {})  # as in a fresh process: other tests made this family

    families, graphs = len(_sliding_kernels._FLEX_FAMILIES), counters["stats"]["unique_graphs"]
    with torch.no_grad():
        for n in (150, 300, 150, 300, 1000):
            flex(*_qkv(n), 5, causal=True, kv_mask=None)
        compiled = counters["stats"]["unique_graphs"] - graphs
        for n in (150, 300, 1000, 1000):
            flex(*_qkv(n), 5, causal=True, kv_mask=None)
    assert len(_sliding_kernels._FLEX_FAMILIES) - families == 1
    assert 1 <= compiled <= _sliding_kernels._FLEX_RECOMPILES_PER_FAMILY[False]
    assert counters["stats"]["unique_graphs"] - graphs == compiled  # nothing compiled for lengths seen before


def test_the_family_key_names_what_dynamo_specialises_on():
    q, k, v = _qkv(37)
    family = _sliding_kernels.flex_family
    base = family(q, k, v)
    assert base == family(*_qkv(37))  # other values, same family
    assert base == family(*_qkv(380))  # CPU: one dynamic graph for every length
    others = [
        family(q.bfloat16(), k.bfloat16(), v.bfloat16()),  # dtype
        family(*_qkv(37, kv_heads=1)),  # GQA
        family(q.detach().requires_grad_(), k, v),  # requires_grad
    ]
    with torch.no_grad():
        others.append(family(*_qkv(37)))  # grad mode
    assert len({base, *others}) == len(others) + 1


def test_every_band_of_a_shape_runs_one_graph():
    """Window, causal and sinks are BlockMask tensors, not guards: another band compiles nothing."""
    from torch._dynamo.utils import counters

    q, k, v = _qkv(300)
    with torch.no_grad():
        flex(q, k, v, 5, causal=True, kv_mask=None)
        graphs = counters["stats"]["unique_graphs"]
        for window, causal, sinks in ((6, True, 0), (5, False, 0), (9, False, 3), (130, True, 140)):
            flex(q, k, v, window, causal=causal, kv_mask=None, sinks=sinks)
    assert counters["stats"]["unique_graphs"] == graphs


def test_on_cuda_every_length_is_its_own_static_family(monkeypatch):
    """Checked without a GPU: where flex compiles static (CUDA), the key names N and M."""
    q, k, _ = _qkv(37)
    on_cuda = SimpleNamespace(device=torch.device("cuda"), shape=q.shape)  # a CUDA tensor's two attributes read
    assert _sliding_kernels.compiles_static(on_cuda, k)
    assert not _sliding_kernels.compiles_static(q, k)  # CPU, square: the dynamic graph
    assert _sliding_kernels.compiles_static(q[:, :, :4], k)  # CPU, a query offset: static (see _sliding_kernels)
    monkeypatch.setattr(_sliding_kernels, "compiles_static", lambda q, k: True)
    family = _sliding_kernels.flex_family
    long, short = family(*_qkv(300)), family(*_qkv(150))
    assert long != short and long[1] is True and long[-1] == (1, 2, 2, 300, 300)


def test_a_recompile_past_the_family_limit_raises_instead_of_running_eager():
    """What flex's context does to any compiled function: the (limit + 1)-th shape is an error, not a silent eager run."""

    def double(x):
        return x * 2

    compiled = torch.compile(double, dynamic=False, backend="eager")
    with _sliding_kernels._strict_recompiles(2):
        compiled(torch.ones(3))
        compiled(torch.ones(4))
        with pytest.raises(Exception, match="recompile_limit|cache_size_limit|Hard failure"):
            compiled(torch.ones(5))


def test_uncompiled_flex_raises(monkeypatch):
    """Dynamo disabled or giving up runs _flex_padded as plain Python: it refuses before any O(N^2) work."""
    monkeypatch.setattr(_sliding_kernels, "_compiled_for", lambda family: _sliding_kernels._flex_padded)
    with pytest.raises(FlexNotCompiledError, match=r"uncompiled on \(1, 2, 37, 16\).*no number is reported"):
        flex(*_qkv(37), 5, causal=True, kv_mask=None)


def test_uncompiled_flex_is_an_error_row_with_no_latency(monkeypatch):
    monkeypatch.setattr(_sliding_kernels, "_compiled_for", lambda family: _sliding_kernels._flex_padded)
    from variants import build_config

    cell = Cell(
        variant="sliding_window",
        config=build_config("sliding_window", window=8, backend="flex").to_dict(),
        seq_len=64,
        kv_len=64,
        batch=1,
        heads=2,
        head_dim=16,
        dtype="float32",
        causal=True,
        mode="forward",
        device="cpu",
        inputs="gaussian",
        seed=0,
    )
    row = measure_cell(cell, MeasureSettings(), RunInfo(run_id="t", device_name="cpu", host="h", threads=1))
    assert row.status == "error" and "uncompiled" in row.reason
    assert row.latency_s is None and row.tflops is None


@pytest.mark.cuda
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_flex_trains_on_one_compiled_graph_per_family_with_exact_gradients(causal):
    """Forward + backward twice on one family (GQA 2:1): one graph, its gradients exact attention's in bf16."""
    from torch._dynamo.utils import counters

    from variants import build_variant, reference_attention

    attn = build_variant("sliding_window", window=40, backend="flex")
    q, k, v = (t.to("cuda", torch.bfloat16).requires_grad_() for t in _qkv(300, kv_heads=1))
    graphs = [counters["stats"]["unique_graphs"]]
    for _ in range(2):
        for t in (q, k, v):
            t.grad = None
        attn(q, k, v, causal=causal).float().square().sum().backward()
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs[1] - graphs[0] <= 1 and graphs[2] == graphs[1]  # causal and not share it: compiled once at most
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    reference_attention(q64, k64, v64, causal=causal, pattern=attn.pattern).square().sum().backward()
    for got, want in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert ((got.double() - want).norm() / want.norm()).item() < 3e-2
