"""The variant contract: config, capabilities, refusals with reasons, and analytic cost.

A variant is an ``nn.Module`` whose ``forward(q, k, v, *, causal=False, kv_mask=None)`` takes
q of shape (B, H, N, D), k and v of shape (B, H, M, D) and returns (B, H, N, D) in q's dtype.
Everything except ``forward`` has a default, so a user's variant can be a config dataclass and
a class with one method.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable

import torch
from torch import Tensor, nn

from variants._checks import check_qkv, softmax_scale  # noqa: F401 - softmax_scale re-exported

# FlashAttention's convention: backward costs 2.5x the forward, so forward+backward is 3.5x.
BACKWARD_FLOPS_FACTOR = 2.5


class NotSupportedError(RuntimeError):
    """A variant was asked for something it declares it cannot do; the message lists why."""

    def __init__(self, variant: str, reasons: list[str]):
        self.variant = variant
        self.reasons = list(reasons)
        super().__init__(f"{variant} cannot run this call: " + "; ".join(self.reasons))


@dataclass(frozen=True, kw_only=True)
class VariantConfig:
    """Base of every variant config: a frozen, keyword-only dataclass validated on construction.

    Subclasses add fields (each with a default that builds on CPU and a comment) and override
    ``validate`` to raise ``ValueError``/``TypeError`` naming the field and the value.
    """

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ValueError/TypeError for an invalid field; the base class has none."""

    def to_dict(self) -> dict[str, Any]:
        """The config as a plain dict, as it goes into every result row."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Capabilities:
    """What a variant can do; the harness and the contract tests read these flags."""

    exact: bool = False  # equals softmax attention (under its own sparsity pattern) up to rounding
    causal: bool = True  # supports causal=True
    kv_mask: bool = True  # supports a key padding mask
    backward: bool = True  # gradients flow to q, k, v (and parameters)
    learnable: bool = False  # has parameters fitted against the exact teacher
    devices: tuple[str, ...] = ("cpu", "cuda")  # device types it runs on
    approximates: str = ""  # for approximate variants: what it approximates and how, one line


class AttentionVariant(nn.Module):
    """Base class of every attention implementation in the registry.

    Subclasses implement ``forward``; the base class validates inputs and refuses unsupported
    calls with ``NotSupportedError`` before ``forward`` runs.
    """

    # Filled in by @register_variant.
    variant_name: ClassVar[str] = ""
    config_class: ClassVar[type[VariantConfig]] = VariantConfig
    # Declared by subclasses.
    capabilities: ClassVar[Capabilities] = Capabilities()
    backends: ClassVar[tuple[str, ...]] = ()  # named implementations; config.backend picks one
    linear_in_v: ClassVar[bool] = True  # output = A(q, k) @ v, so v = identity reveals the attention map
    # Learnable variants whose parameters are per position (Linformer's E, F) must be calibrated at
    # the evaluation length; the others (distilled's feature map) fit once at a short length.
    calibrate_at_eval_length: ClassVar[bool] = False
    # Config overrides under which tiny inputs (tests, attention maps at N ~ 64) still exercise the
    # algorithm: a window or chunk smaller than N, so a band or chunk bug cannot hide.
    small_config: ClassVar[dict[str, Any]] = {}

    def __init__(self, config: VariantConfig | None = None):
        super().__init__()
        if config is None:
            config = self.config_class()
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{type(self).__name__} expects a {self.config_class.__name__}, got "
                f"{type(config).__name__}; build it with build_variant({self.name!r}, **fields)"
            )
        self.config = config

    @property
    def name(self) -> str:
        return self.variant_name or type(self).__name__

    # ---- backends -----------------------------------------------------------------------
    def backend_reasons(self, backend: str, q: Tensor, *, training: bool) -> list[str]:
        """Why `backend` cannot serve tensors like q here ([] if it can). Override per backend."""
        return []

    def resolve_backend(self, q: Tensor, *, training: bool = False) -> str:
        """The backend that will run: config.backend, or for "auto" the first available one.

        Subclasses list ``backends`` fastest first, so "auto" picks the fastest that works on
        q's device in this mode.
        """
        requested = getattr(self.config, "backend", "auto")
        if not self.backends:
            return "default"
        if requested != "auto":
            return requested
        for backend in self.backends:
            if not self.backend_reasons(backend, q, training=training):
                return backend
        return self.backends[0]

    def active_backend(self, q: Tensor, k: Tensor, v: Tensor) -> str:
        """The backend this call runs on: resolve_backend with training inferred from autograd state."""
        return self.resolve_backend(q, training=_wants_grad(self, q, k, v))

    # ---- capabilities -------------------------------------------------------------------
    def not_supported_reasons(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool = False,
        kv_mask: Tensor | None = None,
        training: bool | None = None,
    ) -> list[str]:
        """Every reason this variant cannot run this call ([] if it can).

        `training` (default: grad enabled and an input or parameter requires grad) asks whether
        a backward pass will follow.
        """
        if training is None:
            training = _wants_grad(self, q, k, v)
        caps = self.capabilities
        reasons = []
        if q.device.type not in caps.devices:
            reasons.append(f"runs on {'/'.join(caps.devices)} only, got device {q.device.type!r}")
        if causal and not caps.causal:
            reasons.append("does not support causal=True")
        if kv_mask is not None and not caps.kv_mask:
            reasons.append("does not support a key padding mask (kv_mask)")
        if training and not caps.backward:
            reasons.append("has no backward pass (training mode)")
        if self.backends:
            backend = self.resolve_backend(q, training=training)
            reasons += [f"backend {backend!r} {r}" for r in self.backend_reasons(backend, q, training=training)]
        reasons += self.extra_reasons(q, k, v, causal=causal, kv_mask=kv_mask, training=training)
        return reasons

    def extra_reasons(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, kv_mask: Tensor | None, training: bool
    ) -> list[str]:
        """Variant-specific refusals (e.g. N > max_seq_len). Override; the default has none."""
        return []

    # ---- the pattern the variant is exact to --------------------------------------------
    def pattern(self, query_idx: Tensor, key_idx: Tensor) -> Tensor | None:
        """Which keys each query may see under this variant's sparsity pattern.

        Args: query_idx (R,) and key_idx (M,) integer positions. Returns bool (R, M), or None
        for "all keys". Causality and padding are applied by the reference on top of this, so
        an exact sparse variant is checked against ``reference_attention(..., pattern=...)``.
        """
        return None

    # ---- calibration (learnable variants) -------------------------------------------------
    def fit(self, batches, **options):
        """Fit this variant against the exact teacher: ``variants.calibrate(self, batches, **options)``."""
        from variants.calibrate import calibrate

        return calibrate(self, batches, **options)

    # ---- set-up outside timed regions ------------------------------------------------------
    def prepare(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None, training: bool = False
    ) -> float:
        """Do set-up work for calls like this one (compilation, block masks) and return its seconds.

        The harness calls it before timing, so set-up never lands in a measured latency. Default: none.
        """
        return 0.0

    # ---- analytic cost ------------------------------------------------------------------
    def flops(self, B: int, H: int, N: int, M: int, D: int, causal: bool) -> int:
        """Forward FLOPs, FlashAttention's convention: 4*B*H*N*M*D (QK^T and PV), halved when causal.

        This default is the dense-equivalent cost; variants that do less work override it.
        """
        return dense_flops(B, H, N, M, D, causal)

    # ---- calling --------------------------------------------------------------------------
    def __call__(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None):
        check_qkv(q, k, v, causal=causal, kv_mask=kv_mask)
        reasons = self.not_supported_reasons(q, k, v, causal=causal, kv_mask=kv_mask)
        if reasons:
            raise NotSupportedError(self.name, reasons)
        return super().__call__(q, k, v, causal=causal, kv_mask=kv_mask)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement forward(q, k, v, *, causal, kv_mask)")

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.config.to_dict().items())


def dense_flops(B: int, H: int, N: int, M: int, D: int, causal: bool) -> int:
    """FLOPs of exact attention's two matmuls: 2*N*M*D each, halved when causal (N == M)."""
    total = 4 * B * H * N * M * D
    return total // 2 if causal else total


def train_flops(forward_flops: int) -> int:
    """Forward + backward FLOPs under FlashAttention's convention (backward = 2.5x forward)."""
    return int(round(forward_flops * (1 + BACKWARD_FLOPS_FACTOR)))


def _wants_grad(module: nn.Module, *tensors: Tensor) -> bool:
    if not torch.is_grad_enabled():
        return False
    return any(t.requires_grad for t in tensors) or any(p.requires_grad for p in module.parameters())


def iter_config_fields(config_class: type[VariantConfig]) -> Iterable[dataclasses.Field]:
    """The dataclass fields of a config class, in declaration order."""
    return dataclasses.fields(config_class)
