"""The compiled decode step (variants._decode_step: one AOTInductor kernel) gives the eager step's outputs and leaves the
same state, for every variant with a decode_backend; a compile that fails runs the eager step and says why.

Each compile takes about 12 s on 2 cores, so the cases share shapes where they can (the kernels are cached per shape)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from variants import build_variant, get_variant, list_variants
from variants import _decode_step
from variants._decode_step import DecodeStep

# under xdist one worker runs them all, so the cases that share shapes share their kernel (cached per process)
pytestmark = pytest.mark.xdist_group("compiled-decode")
B, H, D, CONTEXT, STEPS = 2, 4, 16, 13, 6  # small_config's window (4) is below CONTEXT: the ring wraps


def _choosers(choice: str = "compiled") -> list[str]:
    """The variants whose config has a decode_backend that takes `choice`."""
    return [n for n in list_variants() if takes_decode_backend(n, choice)]


def takes_decode_backend(name: str, choice: str) -> bool:
    """Whether variant `name`'s config has a decode_backend field that accepts `choice`."""
    if "decode_backend" not in {f.name for f in dataclasses.fields(get_variant(name).config)}:
        return False
    try:
        get_variant(name).config(decode_backend=choice)
    except ValueError:
        return False
    return True


def _decode(name: str, backend: str, kv_heads: int, padded: bool) -> tuple[torch.Tensor, object, str | None]:
    """Outputs (B, H, STEPS, D), the final state and decode_kind() of a fresh build (seeded: both builds alike)."""
    torch.manual_seed(0)
    attn = build_variant(name, **{**get_variant(name).cls.small_config, "decode_backend": backend}).eval()
    q = torch.randn(B, H, CONTEXT + STEPS, D)
    k, v = (torch.randn(B, kv_heads, CONTEXT + STEPS, D) for _ in range(2))
    mask = torch.ones(B, CONTEXT, dtype=torch.bool)
    mask[0, -3:], mask[1, 2] = False, False  # right padding and a hole, used when padded
    outs = []
    with torch.no_grad():
        attn(q[:, :, :8], k[:, :, :8], v[:, :, :8], causal=True)  # a learnable variant's parameters are made
        state = attn.init_state(k[:, :, :CONTEXT], v[:, :, :CONTEXT], kv_mask=mask if padded else None)
        for t in range(CONTEXT, CONTEXT + STEPS):
            out, state = attn.step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state)
            outs.append(out)
    return torch.cat(outs, dim=2), state, attn.decode_kind()


@pytest.mark.parametrize("name", _choosers())
@pytest.mark.parametrize(
    "kv_heads,padded",
    [pytest.param(H, False, marks=pytest.mark.slow)]  # each compiles a kernel (about 10 s): the full suite runs them
    + [pytest.param(H, True, marks=pytest.mark.slow), pytest.param(2, False, marks=pytest.mark.slow)],
    ids=["plain", "padded", "gqa"],
)
def test_the_compiled_step_equals_the_eager_step(name, kv_heads, padded):
    eager, eager_state, eager_kind = _decode(name, "eager", kv_heads, padded)
    compiled, compiled_state, kind = _decode(name, "compiled", kv_heads, padded)
    assert (eager_kind, kind) == ("eager", "compiled"), f"{name}: the compile did not run here: {kind}"
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)
    for field in ("kv", "z"):  # the running sums, updated in place by both
        torch.testing.assert_close(getattr(compiled_state, field), getattr(eager_state, field), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_auto_compiles_on_cpu_where_no_kernel_is_built(no_c_compiler):
    """Without a C compiler for the hand-written kernel, auto compiles the step on CPU."""
    *_, kind = _decode(_choosers()[0], "auto", H, False)
    assert kind.startswith("compiled (not native: no C compiler"), kind


def test_a_step_that_cannot_compile_runs_eagerly_and_says_why():
    def data_dependent(x: torch.Tensor) -> torch.Tensor:  # export cannot trace a branch on a tensor's value
        return x + 1 if bool(x.sum() > 0) else x - 1

    step, x = DecodeStep(data_dependent, "compiled"), torch.ones(3)
    assert torch.equal(step(x), x + 1)
    assert step.kind.startswith("eager (compile failed: "), step.kind


@pytest.mark.parametrize("name", _choosers("auto"))
def test_a_bad_decode_backend_is_refused(name):
    with pytest.raises(ValueError, match=r"decode_backend must be one of 'auto', 'eager', .*got 'compile'"):
        build_variant(name, decode_backend="compile")


def test_only_a_compiles_own_failure_means_the_eager_step(monkeypatch):
    """A cell's time limit (an Exception its alarm raises mid-compile) ends the cell: it is neither turned into an
    eager step nor cached for the rest of the process; a compiler's own error is."""

    class CellTimeLimit(Exception):
        pass

    def fn(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    def timed_out(*args, **kwargs):
        raise CellTimeLimit("the cell ran past its limit")

    monkeypatch.setattr(torch.export, "export", timed_out)
    step = DecodeStep(fn, "compiled")
    with pytest.raises(CellTimeLimit):
        step(torch.zeros(3))
    assert not [k for k in _decode_step._COMPILED if k[0] is fn]  # nothing cached for that shape

    def refused(*args, **kwargs):
        raise RuntimeError("an operation export refuses")

    monkeypatch.setattr(torch.export, "export", refused)
    assert torch.equal(step(torch.zeros(3)), torch.ones(3)) and step.kind.startswith("eager (compile failed: Runtime")
