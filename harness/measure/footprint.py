"""A cell's memory before it runs: the bytes its inputs and their float64 reference need, refused when the host lacks them.

A cell at a length no machine here holds (a q, k, v of 13 GB on a 2 GB host) would otherwise be allocated, swapped or
killed before anything says why. The estimate is a lower bound built on harness.measure.roofline.bytes_moved (the
cell's forward q, k, v and output in its dtype) plus q, k, v again in float64, from which the exact reference is
computed; the row is `oom` with both numbers, and the cell's inputs are never made.
"""

from __future__ import annotations

import dataclasses

from harness.devices import free_host_memory_bytes
from harness.measure.roofline import BYTES_PER_ELEMENT, bytes_moved
from harness.schema import Cell

FLOAT64_BYTES = 8


def inputs_and_reference_bytes(cell: Cell) -> int:
    """The least bytes a cell holds before its variant runs: q, k, v and an output in the cell's dtype, and q, k, v in
    float64 for the exact reference (decode and layer cells make the same inputs of their N tokens)."""
    forward = bytes_moved(dataclasses.replace(cell, phase="prefill", scope="attention", mode="forward"))
    element = BYTES_PER_ELEMENT.get(cell.dtype, 4)
    output = cell.batch * cell.heads * cell.seq_len * cell.head_dim * element
    return forward + (forward - output) // element * FLOAT64_BYTES


def host_memory_reason(cell: Cell) -> str | None:
    """Why a CPU cell is refused before its inputs are made (they and their reference exceed the host's free memory),
    or None (a CUDA cell's inputs live on the device, whose allocator reports its own out-of-memory)."""
    if not cell.device.startswith("cpu"):
        return None
    free = free_host_memory_bytes()
    need = inputs_and_reference_bytes(cell)
    if free is None or need <= free:
        return None
    return (
        f"the inputs and their float64 reference need at least {need} bytes ({need / 2**30:.2f} GiB), more than the "
        f"{free} bytes ({free / 2**30:.2f} GiB) free on this host: refused before allocating them"
    )
