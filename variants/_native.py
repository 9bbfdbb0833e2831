"""Hand-written decode kernels (variants/native/*.c, one library), built by the machine's C compiler, called by ctypes.

A decode step reads its whole state once per token, so it is memory-bound only if the state is streamed in one pass
with nothing else done per token. torch's operations cannot do that for a single query: SDPA over a 16K-key cache reads
it at 1.5x its bytes-moved time on one CPU thread, and a small state's step is dispatch-bound (docs/timing.md). The
kernels here are plain C (no torch headers: the build takes under a second) for float32 (the one-query kernel splits a
large call over threads; the running-sum steps run on one).

Each source is compiled with -ffast-math (vectorised expf from glibc's libmvec, vectorised reductions) and linked
without it: a shared library linked with -ffast-math carries gcc's crtfastmath, whose constructor would set
flush-to-zero for the whole process when it is loaded (subnormals then read as 0 in every later torch operation).

The library is built once per machine and kept in $XDG_CACHE_HOME/attnsuite/native (else ~/.cache/attnsuite/native),
under a name that hashes the source, the compiler's flags and version, and the CPU's feature flags (it is built with
-march=native, so a cache shared with another kind of CPU builds its own). $CC names the compiler (default cc). Where it
cannot be built or loaded, ``native_library()`` gives the reason instead, and a variant's decode step says it stepped in
torch for that reason: nothing fails for the lack of a compiler.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import torch
from torch import Tensor

NATIVE = Path(__file__).with_name("native")
SOURCES = tuple(NATIVE / name for name in ("decode.c", "steps.c"))  # one library; native/common.h is included by both
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fPIC", "-pthread")  # each source's compile
LINK_FLAGS = ("-shared", "-pthread")  # the link: no -ffast-math (the module doc)
_I64, _PTR, _F32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
# each kernel's C signature (variants/native/*.c): its argument types in order
SIGNATURES: dict[str, list[type]] = {
    "attend_one_query_f32": [_PTR, _I64, _I64]
    + [_PTR, _I64, _I64, _I64] * 2
    + [_PTR, _I64, _PTR]
    + [_I64] * 5
    + [_F32, _I64],
    # variants._native_steps: distilled's and window_linear's steps (q, k, v as pointer and batch, head strides)
    "distilled_step_f32": [_PTR, _I64] + [_PTR, _I64, _I64] * 3 + [_PTR],
    "window_linear_step_f32": [_PTR, _I64] + [_PTR, _I64, _I64] * 3 + [_PTR, _PTR],
}
RETURNS: dict[str, type | None] = {"window_linear_step_f32": ctypes.c_int}  # the others return nothing


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/attnsuite/native, else ~/.cache/attnsuite/native."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnsuite" / "native"


@cache
def native_library() -> ctypes.CDLL | str:
    """The built kernels with their signatures set, or the first line of why they could not be built or loaded
    (once per process)."""
    compiler = os.environ.get("CC") or "cc"
    if shutil.which(compiler) is None:
        return f"no C compiler: {compiler!r} is not on PATH (set CC to one)"
    try:
        library = ctypes.CDLL(str(_built(compiler)))
    except (OSError, subprocess.SubprocessError) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        return f"the native kernels did not build or load: {lines[0][:200]}"
    for name, argtypes in SIGNATURES.items():
        function = getattr(library, name)
        function.argtypes, function.restype = argtypes, RETURNS.get(name)
    return library


def _built(compiler: str) -> Path:
    """The shared library for these sources, flags, compiler and CPU: from the cache, else compiled into it (written
    under a temporary name and renamed, so processes building at once never load a half-written file)."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    sources = sorted(NATIVE.glob("*.[ch]"))  # the headers too
    texts = (*(source.read_text() for source in sources), " ".join(FLAGS + LINK_FLAGS), version, _cpu_flags())
    key = hashlib.sha256(b"\0".join(text.encode() for text in texts))
    target = cache_dir() / f"decode-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built, objects = Path(scratch) / target.name, [str(Path(scratch) / f"{s.stem}.o") for s in SOURCES]
        for source, object_file in zip(SOURCES, objects, strict=True):
            _run([compiler, *FLAGS, "-c", str(source), "-o", object_file])
        _run([compiler, *LINK_FLAGS, *objects, "-o", str(built), "-lm"])
        os.replace(built, target)
    return target


def _run(command: list[str]) -> None:
    """Run a build command; SubprocessError with its output when it fails."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise subprocess.SubprocessError(f"{' '.join(command)} failed: {(done.stderr or done.stdout).strip()}")


def _cpu_flags() -> str:
    """The CPU's feature flags (Linux's /proc/cpuinfo), else the platform's machine name: what -march=native depends
    on."""
    try:
        with open("/proc/cpuinfo") as info:
            return next((line for line in info if line.startswith(("flags", "Features"))), "")
    except OSError:
        return os.uname().machine


def attend_one_query(q: Tensor, k: Tensor, v: Tensor, kv_mask: Tensor | None) -> Tensor | str:
    """softmax(q k^T / sqrt(D)) v for one query per head, q (B, H, 1, D), over keys and values k, v (B, H_kv, M, D)
    (any strides with a contiguous last dimension: a KV cache's live views) and the keys kv_mask (B, M) keeps (None:
    all); query head h reads K/V head h // (H // H_kv); a query that sees no key gets zeros. Returns (B, H, 1, D), or
    why this kernel cannot run the call (the caller runs torch's)."""
    why = _one_query_reason(q, k, v, kv_mask)
    library = native_library() if why is None else why
    if isinstance(library, str):
        return library
    B, H, _, D = q.shape
    out = q.new_empty(B, H, 1, D)
    keep = (None, 0) if kv_mask is None else (kv_mask.data_ptr(), kv_mask.stride(0))
    library.attend_one_query_f32(
        q.data_ptr(), q.stride(0), q.stride(1), k.data_ptr(), *k.stride()[:3], v.data_ptr(), *v.stride()[:3], *keep,
        out.data_ptr(), B, H, k.shape[1], k.shape[2], D, D**-0.5, torch.get_num_threads(),
    )  # fmt: skip
    return out


def _one_query_reason(q: Tensor, k: Tensor, v: Tensor, kv_mask: Tensor | None) -> str | None:
    """Why attend_one_query cannot take these arguments, or None."""
    for t in (q, k, v):
        if not t.is_cpu or t.dtype is not torch.float32:
            return tensor_reason(t)
    if q.shape[2] != 1:
        return f"takes one query per head, got {q.shape[2]}"
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        return NO_BACKWARD
    (B, H, _, D), (_, H_kv, M, _) = q.shape, k.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != D or H % H_kv:
        return f"the shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not fit one another"
    if kv_mask is not None and (kv_mask.dtype is not torch.bool or kv_mask.shape != (B, M) or not kv_mask.is_cpu):
        return f"needs a bool (B, M) = ({B}, {M}) kv_mask on CPU, got {kv_mask.dtype} {tuple(kv_mask.shape)}"
    if any(t.stride(-1) != 1 for t in (q, k, v)) or (kv_mask is not None and kv_mask.stride(-1) != 1):
        return CONTIGUOUS_ROWS
    return None


NO_BACKWARD = "has no backward: decode under torch.no_grad()"  # the kernels' refusals, shared by variants._native_steps
CONTIGUOUS_ROWS = "needs a contiguous last dimension"


def tensor_reason(t: Tensor) -> str:
    """Why the kernels cannot take a tensor that is not a float32 CPU one."""
    return f"runs on CPU only, got {t.device.type}" if not t.is_cpu else f"needs float32, got {t.dtype}"
