"""Seeded input distributions: q, k, v generators registered by name, like variants.

Every generator is a function ``fn(B, H, N, M, D, *, generator, device, **knobs) -> (q, k, v)``
returning float32 tensors (B, H, N, D), (B, H, M, D), (B, H, M, D) drawn only from `generator`,
so a (name, knobs, shape, seed) always gives the same tensors: within a cell every variant sees
the same q, k, v. Knobs are the generator's keyword-only parameters with defaults, given in
an inputs string like ``"gaussian:scale=4"``.

GQA: a generator with a keyword-only ``kv_heads`` parameter draws its structure (a head's direction, type, basis)
per K/V head and returns k, v with kv_heads heads; the G = H // kv_heads query heads of a group share their K/V head's
structure and differ in their own q draws, as in a GQA model. A generator without it (real activations) gets
every G-th head's K/V kept.

A generator may declare ``max_seq_len`` and an ``availability()`` check that returns a reason
when it cannot run here (e.g. a missing optional extra); the sweep records ``unsupported`` rows.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from variants._checks import did_you_mean

QKV = tuple[Tensor, Tensor, Tensor]
_NOT_KNOBS = ("generator", "device", "kv_heads")  # keyword-only parameters make_inputs passes itself


@dataclass(frozen=True)
class InputGenerator:
    """A registered input distribution."""

    name: str
    fn: Callable[..., QKV]
    doc: str  # one line: what the distribution is and which variant it favours
    max_seq_len: int | None = None  # longest N (and M) it can produce; None = no limit
    availability: Callable[[], str | None] | None = None  # returns why it cannot run here, or None
    shape_check: Callable[[int, int, int, int, int], list[str]] | None = None  # (B, H, N, M, D) -> reasons

    @property
    def knobs(self) -> dict[str, Any]:
        """Keyword-only parameters and their defaults (the knobs of ``"name:knob=value"``)."""
        params = inspect.signature(self.fn).parameters.values()
        return {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY and p.name not in _NOT_KNOBS}

    @property
    def draws_per_kv_head(self) -> bool:
        """Whether it takes kv_heads: structure per K/V head, shared by the query heads of its group."""
        return "kv_heads" in inspect.signature(self.fn).parameters

    def unsupported_reason(
        self, N: int, M: int, *, B: int | None = None, H: int | None = None, D: int | None = None
    ) -> str | None:
        """Why this generator cannot produce inputs of this shape here, or None (B, H, D: when known)."""
        if self.availability is not None:
            reason = self.availability()
            if reason:
                return f"inputs {self.name!r}: {reason}"
        if self.max_seq_len is not None and max(N, M) > self.max_seq_len:
            return (
                f"inputs {self.name!r} go up to {self.max_seq_len} tokens, asked for N={N}, M={M}; "
                f"pass --seq-lens of at most {self.max_seq_len}"
            )
        if self.shape_check is not None and None not in (B, H, D):
            reasons = self.shape_check(B, H, N, M, D)
            if reasons:
                return f"inputs {self.name!r}: " + "; ".join(reasons)
        return None


_INPUTS: dict[str, InputGenerator] = {}
# Modules that register more distributions, imported on the first list/get (not at import time).
_EXTRA_MODULES = ("harness.inputs.real", "harness.inputs.model", "harness.inputs.llm")
_extras_loaded = False


def register_inputs(
    name: str,
    *,
    max_seq_len: int | None = None,
    availability: Callable[[], str | None] | None = None,
    shape_check: Callable[[int, int, int, int, int], list[str]] | None = None,
) -> Callable[[Callable[..., QKV]], Callable[..., QKV]]:
    """Decorator: register an input generator under `name` (its docstring's first line documents it).

    max_seq_len: the longest N it produces; availability(): why it cannot run here (a missing extra);
    shape_check(B, H, N, M, D): why it cannot produce that shape. Each refusal becomes an `unsupported` row.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"inputs name must be a Python identifier like 'my_inputs', got {name!r}")

    def decorate(fn: Callable[..., QKV]) -> Callable[..., QKV]:
        existing = _INPUTS.get(name)
        if existing is not None and existing.fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"inputs name {name!r} is already registered by {existing.fn.__qualname__}")
        doc = (fn.__doc__ or "").strip().splitlines()
        _INPUTS[name] = InputGenerator(name, fn, doc[0] if doc else "", max_seq_len, availability, shape_check)
        return fn

    return decorate


def list_inputs() -> list[str]:
    """Sorted names of the registered input distributions."""
    _load_extras()
    return sorted(_INPUTS)


def get_inputs(name: str) -> InputGenerator:
    """The registered generator `name`; an unknown name gets the list and a suggestion."""
    _load_extras()
    try:
        return _INPUTS[name]
    except KeyError:
        raise ValueError(
            f"Unknown inputs {name!r}. Available: {', '.join(list_inputs())}{did_you_mean(name, _INPUTS)}"
        ) from None


def make_inputs(
    name: str,
    knobs: dict[str, Any] | None = None,
    *,
    B: int,
    H: int,
    N: int,
    M: int | None = None,
    D: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = 0,
    H_kv: int | None = None,
) -> QKV:
    """q (B, H, N, D), k and v (B, H_kv, M, D) from distribution `name`, seeded, in `dtype` on `device`.

    H_kv (default H) must divide H. A generator that takes kv_heads draws its structure per K/V head and shares it
    across the group's query heads (see the module doc); for one that does not, K/V head j keeps head j * (H // H_kv),
    so only the first query head of each group keeps the distribution's q-k structure. Raises ValueError for an unknown name or
    knob, an H_kv that does not divide H, or when the generator cannot run (its reason).
    """
    H_kv = H if H_kv is None else int(H_kv)
    if H_kv < 1 or H % H_kv:
        raise ValueError(f"H_kv={H_kv} key/value heads must divide H={H} query heads")
    spec = get_inputs(name)
    knobs = dict(knobs or {})
    unknown = [k for k in knobs if k not in spec.knobs]
    if unknown:
        raise ValueError(
            f"inputs {name!r} has no knob {unknown[0]!r}; its knobs are: "
            f"{', '.join(spec.knobs) or '(none)'}{did_you_mean(unknown[0], spec.knobs)}"
        )
    M = N if M is None else M
    reason = spec.unsupported_reason(N, M, B=B, H=H, D=D)
    if reason:
        raise ValueError(reason)
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(int(seed))
    if spec.draws_per_kv_head:
        knobs["kv_heads"] = H_kv
    q, k, v = spec.fn(B, H, N, M, D, generator=generator, device=device, **knobs)
    if k.shape[1] != H_kv:
        k, v = k[:, :: H // H_kv], v[:, :: H // H_kv]  # (B, H_kv, M, D)
    return tuple(t.to(dtype).contiguous() for t in (q, k, v))  # type: ignore[return-value]


def _load_extras() -> None:
    global _extras_loaded
    if _extras_loaded:
        return
    _extras_loaded = True
    import importlib
    import importlib.util
    import warnings

    for module in _EXTRA_MODULES:
        try:
            if importlib.util.find_spec(module) is not None:
                importlib.import_module(module)
        except Exception as exc:  # an optional distribution must never break the built-in ones
            warnings.warn(f"attnsuite: skipped inputs module {module}: {type(exc).__name__}: {exc}", stacklevel=3)


def _randn(*shape: int, generator: torch.Generator, device: torch.device) -> Tensor:
    return torch.randn(*shape, generator=generator, device=device)


# ---- built-in distributions ---------------------------------------------------------------------
@register_inputs("gaussian")
def gaussian(
    B: int, H: int, N: int, M: int, D: int, *, generator, device, scale: float = 1.0, kv_heads: int | None = None
) -> QKV:
    """iid N(0, 1) q, k, v; `scale` multiplies q, so logits have std ~scale: 1 diffuse, 4+ peaked."""
    Hkv = H if kv_heads is None else kv_heads
    q = _randn(B, H, N, D, generator=generator, device=device) * scale
    k = _randn(B, Hkv, M, D, generator=generator, device=device)
    v = _randn(B, Hkv, M, D, generator=generator, device=device)
    return q, k, v


@register_inputs("local")
def local(
    B: int,
    H: int,
    N: int,
    M: int,
    D: int,
    *,
    generator,
    device,
    scale: float = 12.0,
    noise: float = 0.3,
    base: float = 64.0,
    kv_heads: int | None = None,
) -> QKV:
    """Rotary-rotated copies of one vector per head: logits peak at i == j and fall with |i-j| (windows like it).

    q_i = R(i) (u + noise), k_j = R(j) (u + noise) with RoPE rotations of base `base`, so
    q_i . k_j ~ sum_f |u_f|^2 cos((i-j) theta_f): largest on the diagonal. `scale` sets the peak
    logit (|u|^2 / sqrt(D)); `base` sets how fast the correlation decays with distance.
    """
    Hkv = H if kv_heads is None else kv_heads
    u = _randn(B, Hkv, 1, D, generator=generator, device=device)  # one direction per K/V head
    u = u / u.norm(dim=-1, keepdim=True) * math.sqrt(scale * math.sqrt(D))  # |u|^2 / sqrt(D) = scale
    jitter = noise * u.norm(dim=-1, keepdim=True) / math.sqrt(D)  # per-coordinate noise relative to |u|
    uq, jq = per_query_head(u, H), per_query_head(jitter, H)  # (B, H, 1, D): the group's direction
    q = _rotate(uq + jq * _randn(B, H, N, D, generator=generator, device=device), base)
    k = _rotate(u + jitter * _randn(B, Hkv, M, D, generator=generator, device=device), base)
    v = _randn(B, Hkv, M, D, generator=generator, device=device)
    return q, k, v


@register_inputs("global")
def global_(
    B: int,
    H: int,
    N: int,
    M: int,
    D: int,
    *,
    generator,
    device,
    n_global: int = 4,
    fraction: float = 0.5,
    strength: float = 6.0,
    kv_heads: int | None = None,
) -> QKV:
    """Gaussian, plus `n_global` keys spread over the sequence that a `fraction` of queries match strongly (windows miss them).

    Matching queries get a shared direction g added; the global keys are g scaled so their logit
    is ~`strength` above the rest. The first global key sits at position 0 (visible under causal).
    """
    Hkv = H if kv_heads is None else kv_heads
    q, k, v = gaussian(B, H, N, M, D, generator=generator, device=device, kv_heads=Hkv)
    g = _randn(B, Hkv, 1, D, generator=generator, device=device)
    g = g / g.norm(dim=-1, keepdim=True)  # (B, H_kv, 1, D) unit direction per K/V head
    positions = torch.linspace(0, M - 1, max(1, min(n_global, M)), device=device).round().long().unique()
    matching = torch.rand(B, H, N, 1, generator=generator, device=device) < fraction  # (B, H, N, 1)
    amplitude = math.sqrt(strength * math.sqrt(D))  # (a g) . (a g) / sqrt(D) = strength
    q = q + matching * amplitude * per_query_head(g, H)
    k[:, :, positions] = amplitude * g.expand(B, Hkv, len(positions), D)
    return q, k, v


@register_inputs("lowrank")
def lowrank(
    B: int,
    H: int,
    N: int,
    M: int,
    D: int,
    *,
    generator,
    device,
    rank: int = 8,
    scale: float = 1.0,
    kv_heads: int | None = None,
) -> QKV:
    """q and k confined to one random `rank`-dimensional subspace per head (Linformer likes it); v gaussian."""
    rank, Hkv = max(1, min(int(rank), D)), H if kv_heads is None else kv_heads
    # (B, H_kv, D, r) orthonormal, one per K/V head
    basis, _ = torch.linalg.qr(_randn(B, Hkv, D, rank, generator=generator, device=device))
    coeff_scale = math.sqrt(D / rank)  # keep |q|^2 ~ D as in the gaussian case
    q_basis = per_query_head(basis, H).transpose(-1, -2)
    q = _randn(B, H, N, rank, generator=generator, device=device) @ q_basis * coeff_scale * scale
    k = _randn(B, Hkv, M, rank, generator=generator, device=device) @ basis.transpose(-1, -2) * coeff_scale
    v = _randn(B, Hkv, M, D, generator=generator, device=device)
    return q, k, v


def per_query_head(x: Tensor, H: int) -> Tensor:
    """(B, H_kv, ...) -> (B, H, ...): each K/V head's tensor for the G = H // H_kv query heads of its group."""
    return x.repeat_interleave(H // x.shape[1], dim=1)


def _rotate(x: Tensor, base: float) -> Tensor:
    """RoPE: rotate feature pairs of x (B, H, L, D) by position * theta_f, theta_f = base^(-2f/D)."""
    L, D = x.shape[-2], x.shape[-1]
    half = D // 2
    theta = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) * 2 / D)  # (D/2,)
    angle = torch.arange(L, device=x.device, dtype=torch.float32)[:, None] * theta  # (L, D/2)
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., :half], x[..., half : 2 * half]
    rotated = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return torch.cat([rotated, x[..., 2 * half :]], dim=-1)  # odd D: the last feature is not rotated


def parse_inputs(label: str) -> tuple[str, dict[str, Any]]:
    """``"gaussian:scale=4.0"`` -> ("gaussian", {"scale": 4.0}), knobs typed like their defaults.

    Raises ValueError for an unknown distribution, knob or value.
    """
    from harness.entries import coerce, parse_entry

    name, raw = parse_entry(label)
    spec = get_inputs(name)
    knobs: dict[str, Any] = {}
    for knob, text in raw.items():
        if knob not in spec.knobs:
            raise ValueError(
                f"inputs {name!r} has no knob {knob!r}; its knobs are: {', '.join(spec.knobs) or '(none)'}"
                f"{did_you_mean(knob, spec.knobs)}"
            )
        default = spec.knobs[knob]
        try:
            knobs[knob] = coerce(text, type(default), default)
        except ValueError as exc:
            raise ValueError(f"inputs {name!r} knob {knob!r}: {exc}") from None
    return name, knobs
