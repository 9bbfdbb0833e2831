"""Test-only variants for the sweep tests: each misbehaves in one known way.

Loaded with ``variants.load_plugin(PATH)`` (or ``--plugin PATH`` for a subprocess) inside a
fixture, never at collection time, so the contract tests never see them.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import torch

from variants import NotSupportedError, AttentionVariant, Capabilities, VariantConfig, register_variant
from variants.reference import reference_attention

PATH = os.path.abspath(__file__)
NAMES = (
    "t_noop",
    "t_oom",
    "t_cpu_oom",
    "t_memerror",
    "t_alloc",
    "t_nan",
    "t_raise",
    "t_crash",
    "t_sigkill",
    "t_sleep",
    "t_prepare",
    "t_learn",
    "t_nocausal",
    "t_badgrad",
    "t_oneheaded",
    "t_float64",
    "t_rowshort",
    "t_tuple",
    "t_exit",
    "t_refuse",
    "t_fivedim",
    "t_badflops",
)


def _exact(q, k, v, causal):
    return reference_attention(q, k, v, causal=causal, dtype=None)


@register_variant("t_noop")
class NoopAttention(AttentionVariant):
    """Returns q: measures the harness's own overhead."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return q


@dataclass(frozen=True, kw_only=True)
class OomConfig(VariantConfig):
    oom_from: int = 128  # N at and above which the call runs out of memory


@register_variant("t_oom", config=OomConfig)
class OomAttention(AttentionVariant):
    """Raises torch.cuda.OutOfMemoryError from N >= oom_from."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        if q.shape[2] >= self.config.oom_from:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")
        return _exact(q, k, v, causal)


@register_variant("t_cpu_oom")
class CpuOomAttention(AttentionVariant):
    """Raises the CPU allocator's RuntimeError."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to allocate 68719476736 bytes"
        )


@register_variant("t_memerror")
class MemErrorAttention(AttentionVariant):
    """Raises MemoryError."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        raise MemoryError()


@dataclass(frozen=True, kw_only=True)
class AllocConfig(VariantConfig):
    nbytes: int = 8 << 20  # bytes allocated (and live) during the call, beyond its output


@register_variant("t_alloc", config=AllocConfig)
class AllocAttention(AttentionVariant):
    """Allocates exactly nbytes while making its output (a copy of q)."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        scratch = torch.zeros(self.config.nbytes, dtype=torch.uint8, device=q.device)
        out = q.clone()
        del scratch
        return out


@register_variant("t_nan")
class NanAttention(AttentionVariant):
    """Returns NaN."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return q * float("nan")


@register_variant("t_raise")
class RaiseAttention(AttentionVariant):
    """Raises ValueError('boom')."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        raise ValueError("boom")


@register_variant("t_crash")
class CrashAttention(AttentionVariant):
    """Kills its own process with SIGSEGV (only sensible under --isolate)."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(5)


@register_variant("t_sigkill")
class KillAttention(AttentionVariant):
    """Kills its own process with SIGKILL, as the kernel's OOM killer would (only sensible under --isolate)."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(5)


@dataclass(frozen=True, kw_only=True)
class SleepConfig(VariantConfig):
    seconds: float = 0.2  # sleep per call, then exact attention


@register_variant("t_sleep", config=SleepConfig)
class SleepAttention(AttentionVariant):
    """Sleeps, then exact attention: a slow variant for timeouts and kills."""

    capabilities = Capabilities(exact=True)

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        time.sleep(self.config.seconds)
        return _exact(q, k, v, causal)


@register_variant("t_prepare")
class PrepareAttention(AttentionVariant):
    """Exact attention with a set-up hook that reports 1.5 s and counts its calls."""

    capabilities = Capabilities(exact=True)
    prepared = 0

    def prepare(self, q, k, v, *, causal=False, kv_mask=None, training=False):
        type(self).prepared += 1
        return 1.5

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return _exact(q, k, v, causal)


@register_variant("t_learn")
class LearnAttention(AttentionVariant):
    """Learnable: exact attention times a scalar gain initialised to 0.5 (calibration should fit 1)."""

    capabilities = Capabilities(learnable=True)

    def __init__(self, config=None):
        super().__init__(config)
        self.gain = torch.nn.Parameter(torch.tensor(0.5))

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return _exact(q, k, v, causal) * self.gain.to(q.dtype)


@register_variant("t_nocausal")
class NoCausalAttention(AttentionVariant):
    """Declares causal unsupported."""

    capabilities = Capabilities(causal=False)

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return _exact(q, k, v, causal)


class _HalfGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * 0.5


@register_variant("t_badgrad")
class BadGradAttention(AttentionVariant):
    """Exact forward, but its gradients are halved: the gradient check must catch it."""

    capabilities = Capabilities(exact=True)

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return _HalfGrad.apply(_exact(q, k, v, causal))


@register_variant("t_oneheaded")
class OneHeadedAttention(AttentionVariant):
    """Returns (B, 1, N, D): it broadcasts against the reference, so only a shape check catches it."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return _exact(q, k, v, causal)[:, :1]


@register_variant("t_float64")
class Float64Attention(AttentionVariant):
    """Returns float64 from float32 inputs."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return reference_attention(q, k, v, causal=causal)


@register_variant("t_rowshort")
class RowShortAttention(AttentionVariant):
    """Returns one query row too few."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return _exact(q, k, v, causal)[:, :, :-1]


@register_variant("t_tuple")
class TupleAttention(AttentionVariant):
    """Returns (output, weights) like some libraries do."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return _exact(q, k, v, causal), None


@register_variant("t_exit")
class ExitAttention(AttentionVariant):
    """Calls sys.exit(3) inside its forward."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        raise SystemExit(3)


@register_variant("t_refuse")
class PlainRefusalAttention(AttentionVariant):
    """Refuses causal calls the way README shows: raise NotSupportedError("...") with a plain message."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        if causal:
            raise NotSupportedError("causal not implemented")
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


@register_variant("t_fivedim")
class FiveDimAttention(AttentionVariant):
    """Returns its output with an extra leading dimension: (1, B, H, N, D)."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)[None]


@register_variant("t_badflops")
class BadFlopsAttention(AttentionVariant):
    """Exact attention with a planted wrong FLOP formula (a million times the work): its row must be impossible."""

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return _exact(q, k, v, causal)

    def flops(self, B, H, N, M, D, causal):
        return 10**6 * 4 * B * H * N * M * D
