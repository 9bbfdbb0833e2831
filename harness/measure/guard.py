"""What a variant cannot change for anyone else: its inputs (a checksum of q, k, v when made, checked after each cell),
and its answer (a timed call's output is scored too, so a variant right only on its checked call is caught).

Inputs are made once and shared by consecutive cells (harness.measure.context), so a variant that writes into q, k or
v in place would falsify every later row and its own reference. Copying them for every call would put a copy inside
the timed loop; instead each tensor's checksum is taken when the inputs are made and compared after every cell: one
read of q, k and v per cell (the cell's own calls read them dozens of times). A change makes the cell an `error` row
naming the tensor, and the inputs are made again for the next cell.

The checksum is two integer sums over the tensor's bits (plain, and weighted by the position within a chunk of 2**22
elements, wrapping in the element's size, times the chunk's number), exact and the same in any reduction order: any change of values is seen, and so
is a permutation unless it swaps elements of equal weight, which no in-place arithmetic does.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor

_CHUNK = 1 << 22  # elements summed at a time: bounds the int64 temporaries (32 MiB) on any device
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class InputsChanged(Exception):
    """The variant wrote into the inputs it was given."""


def checksum(t: Tensor) -> tuple[int, int]:
    """(sum, position-weighted sum) of the tensor's bits, read as integers of its element size: products wrap in that
    size, sums accumulate in int64 (torch promotes), so no widened copy is made. Equal exactly when the bits are equal
    (but for swaps of equally weighted positions)."""
    flat = t.detach().reshape(-1).view(_BITS[t.element_size()])
    weights = _weights(t.device, flat.dtype)
    plain = weighted = 0
    for index, start in enumerate(range(0, flat.numel(), _CHUNK)):
        part = flat[start : start + _CHUNK]
        plain += int(part.sum())
        weighted += int((part * weights[: part.numel()]).sum()) * (index + 1)
    return plain, weighted


_WEIGHTS: dict[tuple[str, torch.dtype], Tensor] = {}


def _weights(device: torch.device, dtype: torch.dtype) -> Tensor:
    """1, 2, ..., _CHUNK in `dtype` (wrapping) on `device`, made once: a position's weight within its chunk."""
    key = (str(device), dtype)
    if key not in _WEIGHTS:
        _WEIGHTS[key] = torch.arange(1, _CHUNK + 1, dtype=torch.int64, device=device).to(dtype)
    return _WEIGHTS[key]


def checksums(tensors: dict[str, Tensor]) -> dict[str, tuple[int, int]]:
    """The checksum of each named tensor."""
    return {name: checksum(t) for name, t in tensors.items()}


def changed(tensors: dict[str, Tensor], before: dict[str, tuple[int, int]]) -> list[str]:
    """The names of the tensors whose checksum is no longer the one taken `before`."""
    return [name for name, t in tensors.items() if checksum(t) != before[name]]


def changed_reason(names: list[str]) -> str:
    """The error row's reason for inputs a variant wrote into."""
    listed = ", ".join(names)
    return (
        f"the variant changed its input{'s' if len(names) > 1 else ''} {listed} in place (checksum before and after the "
        "cell differ); a variant must not write into q, k or v: other cells and the reference read them"
    )


class LastOutput:
    """A step that keeps what its last call returned (the step's output, or (output, grads) in train mode), so a
    timed call's output can be scored after the timing: one reference kept per call, nothing computed."""

    def __init__(self, step: Callable[[], Any]):
        self.step, self.value = step, None

    def __call__(self) -> Any:
        self.value = self.step()
        return self.value


# a timed call whose error exceeds the checked call's by more than this factor (and this much) is an error: not
# run-to-run noise of a deterministic kernel (identical outputs) nor of GPU atomics (relative 1e-6)
TIMED_FACTOR, TIMED_SLACK = 2.0, 1e-3


def timed_mismatch(checked: float | None, timed: float | None) -> str | None:
    """Why a timed call's rel L2 error disagrees with the checked call's, or None when it does not."""
    if checked is None or timed is None or timed <= TIMED_FACTOR * checked + TIMED_SLACK:
        return None
    return (
        f"a timed call's output has rel L2 error {timed:.3g} against the checked call's {checked:.3g}: the variant "
        "must return the same answer on every call"
    )
