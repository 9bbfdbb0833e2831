"""A decode step as one pure tensor function: run by a hand-written kernel, eagerly, or compiled into one C++ kernel.

distilled's and window_linear's decode states are small (running sums, a short ring), so their eager step is
dispatch-bound: about 20 and 35 small torch operations at 2-16 us each (docs/timing.md). The compiled step is the same
function exported (torch.export) and compiled by AOTInductor (inductor's C++ code, built with the machine's C++
compiler): one call into a shared library per token, without Dynamo's per-call guards (torch.compile's wrapper alone
costs about 20 us a call on this CPU) and without a dispatch per operation. The function updates its state in place and
returns the output, so both ways leave the same state.

A variant's config field ``decode_backend`` chooses: "native" runs the variant's hand-written kernel (variants._native:
plain C, float32 on CPU, one pass over the state) where it can take the call, else the eager function; "eager" calls
the function; "compiled" compiles it once per process for each shape, dtype, device and thread count (the parameters
are arguments, never baked in, so a student trained later needs no new compile); "auto" is "native" where the kernel
takes the call, else "compiled" on CPU (for a step that compiles) and "eager" elsewhere (on CUDA AOTInductor would need
triton, and the eager step stays as it was). A kernel that cannot run (another dtype or device, no C compiler) or a
compile that fails (no C++ compiler, an operation export or inductor refuses) leaves the next way for that call, and
``DecodeStep.kind`` says what ran and why: a step never fails for it.
"""

from __future__ import annotations

import subprocess
from typing import Any, Callable

import torch
from torch import Tensor, nn

DECODE_BACKENDS = ("auto", "eager", "compiled", "native")  # a variant config's decode_backend; see the module doc
ONE_QUERY_DECODE_BACKENDS = ("auto", "eager", "native")  # a step that is never compiled (dense's, sliding_window's)
# what a failed export or compile raises (inductor's and export's errors are RuntimeErrors; a compiler that cannot run:
# OSError, SubprocessError). Anything else propagates: a cell's time limit (an Exception raised by its alarm) must end
# the cell, not turn into an eager step cached for the rest of the process.
COMPILE_FAILURES = (RuntimeError, OSError, subprocess.SubprocessError, NotImplementedError, TypeError, ValueError)

# (function, the arguments' shapes, dtypes, devices, torch threads) -> the loaded kernel, or why it did not compile
_COMPILED: dict[tuple[Any, ...], Callable[..., Tensor] | str] = {}


class DecodeStep:
    """`fn(*args) -> out`, run as `backend` says (DECODE_BACKENDS). `native(*args)` (variants._native) is the same
    step by a hand-written kernel: its output, or why it cannot run these arguments; "native" and "auto" try it first;
    `native_reason(*args)` says that why without running anything (prepare compiles only where it is not None).
    Every argument must be contiguous for the compiled kernel (it was compiled for contiguous ones): a call with one
    that is not runs eagerly, except the first `tokens` arguments (the token's inputs, often views of a longer sequence,
    never written), which the torch steps get as contiguous copies and the kernel as they are. `compiles=False`: a step
    that is never compiled ("auto" falls back to eager)."""

    def __init__(
        self,
        fn: Callable[..., Tensor],
        backend: str,
        *,
        native: Callable[..., Tensor | str] | None = None,
        native_reason: Callable[..., str | None] | None = None,
        compiles: bool = True,
        tokens: int = 0,
    ):
        self.fn, self.backend, self.native, self.native_reason = fn, backend, native, native_reason
        self.compiles, self.tokens = compiles, tokens
        # what the last call ran: "native", "compiled", "eager" or "eager (compile failed: ...)", with why not native
        self.kind = "eager"

    def __call__(self, *args: Any) -> Tensor:
        not_native = ""
        if self.native is not None and self.backend in ("auto", "native"):
            out = self.native(*args)
            if not isinstance(out, str):
                self.kind = "native"
                return out
            if self.backend == "native" or args[0].is_cpu:  # auto on a GPU: no kernel was expected there
                not_native = f" (not native: {out})"
        if self.tokens:  # the token's views of a longer sequence, as the compiled kernel's contiguous layout
            args = (*(a.contiguous() for a in args[: self.tokens]), *args[self.tokens :])
        compiled = self._compiled(args)
        self.kind += not_native
        return self.fn(*args) if compiled is None else compiled(*args)

    def prepare(self, *args: Tensor) -> None:
        """Compile for arguments like these (nothing runs, nothing is changed, `kind` included): a variant's init_state
        calls it, so the compile is set-up, never part of a timed step. Not where the native kernel takes them
        (`native_reason` says None): no step would run the compiled one."""
        if self.native_reason is not None and self.backend in ("auto", "native") and self.native_reason(*args) is None:
            return
        kind = self.kind
        self._compiled(args)
        self.kind = kind

    def _compiled(self, args: tuple[Tensor, ...]) -> Callable[..., Tensor] | None:
        wanted = self.backend == "compiled" or (self.backend == "auto" and args[0].device.type == "cpu")
        if not wanted or not self.compiles or not all(a.is_contiguous() for a in args):
            self.kind = "eager"
            return None
        key = (self.fn, torch.get_num_threads(), *((a.shape, a.dtype, a.device) for a in args))
        if key not in _COMPILED:
            _COMPILED[key] = _compile(self.fn, args)
        found = _COMPILED[key]
        self.kind = f"eager (compile failed: {found})" if isinstance(found, str) else "compiled"
        return None if isinstance(found, str) else found


class _AsModule(nn.Module):
    """A function as a module: what torch.export takes."""

    def __init__(self, fn: Callable[..., Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Tensor) -> Tensor:
        return self.fn(*args)


def _compile(fn: Callable[..., Tensor], args: tuple[Tensor, ...]) -> Callable[..., Tensor] | str:
    """fn exported on copies of args and compiled by AOTInductor, or the first line of why it could not be."""
    import torch._inductor  # inductor is heavy and only a compiled step needs it

    try:
        with torch.no_grad():
            program = torch.export.export(_AsModule(fn), tuple(a.clone() for a in args), strict=False)
            loader = torch._inductor.aoti_load_package(torch._inductor.aoti_compile_and_package(program)).loader
    except COMPILE_FAILURES as error:  # the compiler missing, an op refused: the eager step, with its reason
        lines = str(error).strip().splitlines() or [""]
        return f"{type(error).__name__}: {lines[0][:200]}"
    # The packaged model's __call__ parses its two pytree specs (JSON) on every call, about 11 us on this CPU: fn takes
    # flat tensors and returns one, so its loader runs it directly (about 2 us a call).
    return lambda *tensors: loader.run(list(tensors))[0]
