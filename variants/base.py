"""The variant contract: config, capabilities, refusals with reasons, and analytic cost.

A variant is an ``nn.Module`` whose ``forward(q, k, v, *, causal=False, kv_mask=None)`` takes q of shape (B, H, N, D),
k and v of shape (B, H_kv, M, D) with H % H_kv == 0 (grouped-query attention: query head h reads K/V head
h // (H // H_kv); H_kv = H is plain multi-head) and returns (B, H, N, D) in q's dtype. ``causal=True`` needs M >= N: the queries are the last N of the M positions
(bottom-right, query i sees keys j <= i + M - N); a variant serving M > N declares ``Capabilities.causal_offset``.
Call features (``softcap=``, ``sink_logits=``, ``int8_scores=``: variants/_model_features.py) reach ``forward`` only
when given and declared. Everything except ``forward`` has a default, so a user's variant can be a config dataclass and
one method.

Decoding (optional, ``Capabilities.decode``): ``init_state(k, v, *, kv_mask=None)`` builds the
state for a context, ``step(q_t, k_t, v_t, state) -> (out_t, state)`` adds one token and returns
its causal output; ``decode_reasons`` says beforehand why a variant cannot, and
``state_bytes(state)`` counts the state's memory, ``decode_step_flops`` one step's FLOPs.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Iterable

import torch
from torch import Tensor, nn

from variants._checks import check_qkv, softmax_scale  # noqa: F401 - softmax_scale re-exported
from variants._decode_contract import DecodeContract
from variants._flops import BACKWARD_FLOPS_FACTOR, count_flops, dense_flops, train_flops  # noqa: F401 - re-exported
from variants._capability_reasons import capability_reasons
from variants._model_features import check_model_features, given_features
from variants._declarations import Capabilities, NotSupportedError, QualityKnob, VariantConfig  # noqa: F401 - re-exported


class AttentionVariant(DecodeContract, nn.Module):
    """Base class of every attention implementation in the registry.

    Subclasses implement ``forward``; the base class validates inputs and refuses unsupported
    calls with ``NotSupportedError`` before ``forward`` runs: on every call of ``variant(q, k, v)``, or
    once for the repeated calls of ``prepare_call`` (what the harness times). Decoding's defaults are
    inherited from DecodeContract (variants/_decode_contract.py).
    """

    # Filled in by @register_variant.
    variant_name: ClassVar[str] = ""
    config_class: ClassVar[type[VariantConfig]] = VariantConfig
    # Declared by subclasses.
    capabilities: ClassVar[Capabilities] = Capabilities()
    backends: ClassVar[tuple[str, ...]] = ()  # named implementations; config.backend picks one
    linear_in_v: ClassVar[bool] = True  # output = A(q, k) @ v, so v = identity reveals the attention map
    # Config overrides under which tiny inputs (tests, attention maps at N ~ 64) still exercise the
    # algorithm: a window or chunk smaller than N, so a band or chunk bug cannot hide.
    small_config: ClassVar[dict[str, Any]] = {}
    # The config field that trades speed for accuracy (None: exact variants, nothing to trade).
    quality_knob: ClassVar[QualityKnob | None] = None
    # Config fields that follow the key length M unless a user sets them (Linformer's max_seq_len:
    # projections sized for the N measured, not for the longest N of a sweep).
    length_fields: ClassVar[tuple[str, ...]] = ()
    # How far torch.utils.flop_counter's count of a CPU forward may be from executed_flops(): within a factor of
    # (1 + flops_tolerance) either way (tests/variants/test_flops.py, registry-wide). The default, a factor of two,
    # admits a plugin that masks a full N x M for causal=True while counting dense's half; built-ins declare theirs.
    flops_tolerance: ClassVar[float] = 1.0
    # feature -> the backends that honour it, where not all do (dense: softcap on "reference" only); "auto" picks one
    feature_backends: ClassVar[dict[str, tuple[str, ...]]] = {}
    _pinned_backend: ClassVar[str | None] = None  # set while a prepare_call call runs: its backend, resolved once

    @classmethod
    def config_for_length(cls, config: dict[str, Any], M: int, *, fixed: Iterable[str] = ()) -> dict[str, Any]:
        """The config a cell with key length M measures: each of `length_fields` not in `fixed` (set by a user) becomes M."""
        return {**config, **{f: M for f in cls.length_fields if f not in set(fixed)}}

    @classmethod
    def calibration_length(cls, config: Any, N: int, cap: int) -> int:
        """The length a learnable variant is fitted at for evaluation length N, given the run's cap
        (calibration_max_seq_len): min(N, cap), one fit per series. A variant whose parameters are per position
        (Linformer's E, F) or whose learned part sees only keys beyond a window overrides it."""
        return min(N, cap)

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
        """The backend this call runs on: the one prepare_call resolved for its calls, else resolve_backend with
        training inferred from autograd state. A forward asks this, so a prepared call resolves nothing."""
        if self._pinned_backend is not None:
            return self._pinned_backend
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
        softcap: float | None = None,
        sink_logits: Tensor | None = None,
        int8_scores: bool | None = None,
        training: bool | None = None,
    ) -> list[str]:
        """Every reason this variant cannot run this call ([] if it can).

        `training` (default: grad enabled and an input or parameter requires grad) asks whether
        a backward pass will follow. softcap, sink_logits, int8_scores: the call features (refused unless declared).
        """
        if training is None:
            training = _wants_grad(self, q, k, v)
        features = given_features(softcap, sink_logits, int8_scores)
        reasons = capability_reasons(self, q, k, causal=causal, kv_mask=kv_mask, training=training, features=features)
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

    # ---- decoding: decode_reasons, check_decode, init_state, step, state_bytes (variants/_decode_contract.py) ----

    def windowed(self, window: int) -> "AttentionVariant | None":
        """This variant restricted to a model's own causal sliding window (key j visible to query i when
        i - window < j <= i: Mistral's, Qwen2's sliding layers), as a variant computing it exactly; None (the default)
        when it cannot, and the transformers adapter refuses such a layer naming the window."""
        return None

    # ---- the pattern the variant is exact to --------------------------------------------
    def pattern(self, query_idx: Tensor, key_idx: Tensor) -> Tensor | None:
        """Which keys each query may see under this variant's sparsity pattern.

        Args: query_idx (R,) and key_idx (M,) integer positions. Returns bool (R, M), or None
        for "all keys". Causality and padding are applied by the reference on top of this, so
        an exact sparse variant is checked against ``reference_attention(..., pattern=...)``.
        """
        return None

    # ---- the weights on each key (the weight metric; weight_ce calibration) ------------------
    # True where attention_weights may be negative (Linformer's effective weights): no KL, no cross-entropy on them
    signed_weights: ClassVar[bool] = False

    def attention_weights(
        self, q: Tensor, k: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None, rows: Tensor | None = None
    ) -> Tensor | None:
        """The weight this variant gives each key for query rows `rows` (R,) (default all): (B, H, R, M), so that its
        output on those rows is the weights applied to v (each query head to its K/V head's v). Materialises R x M:
        for sampled rows, never in forward. The default declines with None (a row's weight metric then stays empty)."""
        return None

    attention_weights.declines = True  # type: ignore[attr-defined] - the mark variants.calibrate tells the default by

    # ---- calibration (learnable variants) -------------------------------------------------
    def fit(self, batches, **options):
        """Fit this variant against the exact teacher: ``variants.calibrate(self, batches, **options)``."""
        from variants.calibrate import calibrate

        return calibrate(self, batches, **options)

    # ---- set-up outside timed regions ------------------------------------------------------
    def prepare(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool = False,
        kv_mask: Tensor | None = None,
        training: bool = False,
    ) -> float:
        """Do set-up work for calls like this one (compilation, block masks) and return its seconds.

        The harness calls it before timing, so set-up never lands in a measured latency. Default: none.
        """
        return 0.0

    # ---- analytic cost ------------------------------------------------------------------
    def flops(self, B: int, H: int, N: int, M: int, D: int, causal: bool, *, H_kv: int | None = None) -> int:
        """Forward FLOPs of the algorithm's useful work, FlashAttention's convention: 4*B*H*N*M*D (QK^T and PV), halved
        when causal. H_kv (default H): K/V heads, for variants whose work per K/V head (a projection of the keys)
        is shared by a group of query heads.

        This default is the dense-equivalent cost; variants that do less work override it.
        """
        return dense_flops(B, H, N, M, D, causal)

    def executed_flops(
        self,
        B: int,
        H: int,
        N: int,
        M: int,
        D: int,
        causal: bool,
        *,
        H_kv: int | None = None,
        backend: str | None = None,
    ) -> int:
        """Forward FLOPs the backend runs (`backend`, default the config's; "auto" reads as the first declared, the CPU
        choice): TFLOP/s and the search's FLOP cap use it. Default: the useful count, ``flops``."""
        return count_flops(self, B, H, N, M, D, causal, H_kv=H_kv)

    # ---- calling --------------------------------------------------------------------------
    def __call__(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None, **features
    ):
        """The checked call; `features`: softcap=, sink_logits=, int8_scores= where declared (_model_features.py)."""
        return self.prepare_call(q, k, v, causal=causal, kv_mask=kv_mask, **features)(q, k, v)

    def prepare_call(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool = False,
        kv_mask: Tensor | None = None,
        softcap: float | None = None,
        sink_logits: Tensor | None = None,
        int8_scores: bool | None = None,
        training: bool | None = None,
    ) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        """Check a call once and return it ready to repeat: ``call(q, k, v)`` runs the module (forward) unchecked.

        The checks (check_qkv; NotSupportedError with every reason) run here, and the backend is resolved here and
        pinned for the returned call, so a forward asking ``active_backend`` resolves nothing. ``variant(q, k, v)``
        is this called once; a benchmark times the returned call, since on a GPU at small N the Python of the checks
        would be most of a latency. Give it tensors like these (shapes, dtype, device; causal and kv_mask are bound).
        `training` (default: whether autograd would record this call): whether a backward pass follows.
        softcap, sink_logits, int8_scores (bound too) reach forward only when given.
        """
        check_qkv(q, k, v, causal=causal, kv_mask=kv_mask)
        check_model_features(q, softcap=softcap, sink_logits=sink_logits, int8_scores=int8_scores)
        features = given_features(softcap, sink_logits, int8_scores)
        training = _wants_grad(self, q, k, v, *features.values()) if training is None else training
        reasons = self.not_supported_reasons(q, k, v, causal=causal, kv_mask=kv_mask, training=training, **features)
        if reasons:
            raise NotSupportedError(self.name, reasons)
        backend = self.resolve_backend(q, training=training)
        module_call = super().__call__  # nn.Module's: hooks, forward

        def call(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            pinned = self._pinned_backend
            # not nn.Module's __setattr__: this runs in timed calls
            object.__setattr__(self, "_pinned_backend", backend)
            try:
                return module_call(q, k, v, causal=causal, kv_mask=kv_mask, **features)
            finally:
                object.__setattr__(self, "_pinned_backend", pinned)

        return call

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None
    ) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement forward(q, k, v, *, causal, kv_mask)")

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.config.to_dict().items())


def _wants_grad(module: nn.Module, *tensors: Any) -> bool:
    if not torch.is_grad_enabled():
        return False
    return any(isinstance(t, Tensor) and t.requires_grad for t in tensors) or any(
        p.requires_grad for p in module.parameters()
    )
