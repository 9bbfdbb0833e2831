"""The registry of input distributions: register_inputs, list_inputs, get_inputs, make_inputs and parse_inputs.

Generators register by name (the built-ins in harness/inputs/__init__.py; harness.inputs.real, model and llm are
imported on the first list or get, so an optional extra that is missing never breaks the others). The contract a
generator keeps is in the package's docstring (harness.inputs).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from harness.entries import coerce, parse_entry
from variants._checks import did_you_mean

QKV = tuple[Tensor, Tensor, Tensor]
_NOT_PARAMS = ("generator", "device", "kv_heads")  # keyword-only parameters make_inputs passes itself


@dataclass(frozen=True)
class InputGenerator:
    """A registered input distribution."""

    name: str
    fn: Callable[..., QKV]
    doc: str  # one line: what the distribution is and which variant it favours
    max_seq_len: int | None = None  # longest N (and M) it can produce; None = no limit
    availability: Callable[[], str | None] | None = None  # returns why it cannot run here, or None
    # (B, H, N, M, D, *, kv_heads, **params) -> reasons: the cell's shape and the entry's params ("model:path=...")
    shape_check: Callable[..., list[str]] | None = None

    @property
    def params(self) -> dict[str, Any]:
        """Keyword-only parameters and their defaults (the params of ``"name:param=value"``)."""
        signature = inspect.signature(self.fn).parameters.values()
        return {p.name: p.default for p in signature if p.kind is p.KEYWORD_ONLY and p.name not in _NOT_PARAMS}

    @property
    def draws_per_kv_head(self) -> bool:
        """Whether it takes kv_heads: structure per K/V head, shared by the query heads of its group."""
        return "kv_heads" in inspect.signature(self.fn).parameters

    def unsupported_reason(
        self,
        N: int,
        M: int,
        *,
        B: int | None = None,
        H: int | None = None,
        D: int | None = None,
        H_kv: int | None = None,
        params: dict[str, Any] | None = None,
    ) -> str | None:
        """Why this generator cannot produce inputs of this shape (and `params`) here, or None (B, H, D: when known)."""
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
            reasons = self.shape_check(B, H, N, M, D, **self._check_keywords(H_kv, params or {}))
            if reasons:
                return f"inputs {self.name!r}: " + "; ".join(reasons)
        return None

    def _check_keywords(self, H_kv: int | None, params: dict[str, Any]) -> dict[str, Any]:
        """What shape_check takes of kv_heads and the entry's params: all for a check with **kwargs, else those it
        names, so a check written as shape_check(B, H, N, M, D) (the form documented first) keeps working."""
        given = {"kv_heads": H_kv, **params}
        accepted = inspect.signature(self.shape_check).parameters
        if any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
            return given
        return {name: value for name, value in given.items() if name in accepted}


_INPUTS: dict[str, InputGenerator] = {}
# Modules that register more distributions, imported on the first list/get (not at import time).
_EXTRA_MODULES = ("harness.inputs.real", "harness.inputs.model", "harness.inputs.llm")
_extras_loaded = False


def register_inputs(
    name: str,
    *,
    max_seq_len: int | None = None,
    availability: Callable[[], str | None] | None = None,
    shape_check: Callable[..., list[str]] | None = None,
) -> Callable[[Callable[..., QKV]], Callable[..., QKV]]:
    """Decorator: register an input generator under `name` (its docstring's first line documents it).

    max_seq_len: the longest N it produces; availability(): why it cannot run here (a missing extra);
    shape_check(B, H, N, M, D, *, kv_heads, **params): why it cannot produce that shape with those params (kv_heads:
    H_kv, or None when unknown). A refusal of a shape the sweep's spec asks for is a usage error before the run when
    it refuses every cell of the entry (harness.spec.inputs_fit); else each refusal becomes an `unsupported` row.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"inputs name must be a Python identifier like 'my_inputs', got {name!r}")

    def decorate(fn: Callable[..., QKV]) -> Callable[..., QKV]:
        existing = _INPUTS.get(name)
        if existing is not None and _origin(existing.fn) != _origin(fn):  # the same function again (a reload) is fine
            raise ValueError(
                f"inputs name {name!r} is already registered by {_origin(existing.fn)}; register {_origin(fn)} "
                "under a name of its own"
            )
        doc = (fn.__doc__ or "").strip().splitlines()
        _INPUTS[name] = InputGenerator(name, fn, doc[0] if doc else "", max_seq_len, availability, shape_check)
        return fn

    return decorate


def _origin(fn: Callable[..., QKV]) -> str:
    """Where a generator was defined: its module and qualified name (a plugin's `model` is not the built-in's)."""
    return f"{fn.__module__}.{fn.__qualname__}"


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
    params: dict[str, Any] | None = None,
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
    parameter, an H_kv that does not divide H, or when the generator cannot run (its reason).
    """
    H_kv = H if H_kv is None else int(H_kv)
    if H_kv < 1 or H % H_kv:
        raise ValueError(f"H_kv={H_kv} key/value heads must divide H={H} query heads")
    spec = get_inputs(name)
    params = dict(params or {})
    unknown = [k for k in params if k not in spec.params]
    if unknown:
        raise ValueError(
            f"inputs {name!r} has no parameter {unknown[0]!r}; its parameters are: "
            f"{', '.join(spec.params) or '(none)'}{did_you_mean(unknown[0], spec.params)}"
        )
    M = N if M is None else M
    reason = spec.unsupported_reason(N, M, B=B, H=H, D=D, H_kv=H_kv, params=params)
    if reason:
        raise ValueError(reason)
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(int(seed))
    if spec.draws_per_kv_head:
        params["kv_heads"] = H_kv
    q, k, v = spec.fn(B, H, N, M, D, generator=generator, device=device, **params)
    if k.shape[1] != H_kv:
        k, v = k[:, :: H // H_kv], v[:, :: H // H_kv]  # (B, H_kv, M, D)
    return tuple(t.to(dtype).contiguous() for t in (q, k, v))  # type: ignore[return-value]


def _load_extras() -> None:
    global _extras_loaded
    if _extras_loaded:
        return
    _extras_loaded = True
    for module in _EXTRA_MODULES:
        try:
            if importlib.util.find_spec(module) is not None:
                importlib.import_module(module)
        except Exception as exc:  # an optional distribution must never break the built-in ones
            warnings.warn(f"attnsuite: skipped inputs module {module}: {type(exc).__name__}: {exc}", stacklevel=3)


def parse_inputs(label: str) -> tuple[str, dict[str, Any]]:
    """``"gaussian:scale=4.0"`` -> ("gaussian", {"scale": 4.0}), params typed like their defaults.

    Raises ValueError for an unknown distribution, parameter or value.
    """
    name, raw = parse_entry(label)
    spec = get_inputs(name)
    params: dict[str, Any] = {}
    for param, text in raw.items():
        if param not in spec.params:
            raise ValueError(
                f"inputs {name!r} has no parameter {param!r}; its parameters are: {', '.join(spec.params) or '(none)'}"
                f"{did_you_mean(param, spec.params)}"
            )
        default = spec.params[param]
        try:
            params[param] = coerce(text, type(default), default)
        except ValueError as exc:
            raise ValueError(f"inputs {name!r} parameter {param!r}: {exc}") from None
    return name, params
