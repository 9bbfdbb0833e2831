"""The `model` input distribution: the q, k, v a transformers model's attention layer receives on real text.

``--inputs model:path=DIR,layer=0`` (optionally ``text=FILE``, default Python's documentation, and
``tokenizer=bytes`` for a folder without a tokenizer: the text's UTF-8 bytes; default the model's own): B windows
of N consecutive tokens of the text's first three quarters, at seeded offsets, run through the model
loaded from DIR (a local folder with safetensors weights; never code shipped with a model); the
chosen layer's q, k, v are recorded as the model's attention gets them (after RoPE, GQA kept, q
pre-scaled for a non-default scaling). The cell's H, H_kv and D must be the model's: any other
shape is refused with the model's values. Captures are cached as safetensors in the run folder
(``model_inputs/``, while a sweep runs: see ``run_folder``), so a resume or a second budget does not
re-run the model. Needs ``pip install 'attnsuite[hf]'``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Iterator

import torch

from harness.inputs import QKV, register_inputs
from harness.errors import UsageError
from harness.models import hf_adapter, hf_model
from harness.models.minilm import corpus
from harness.safe_files import write_plain
from harness.text_files import read_user_text

RUN_DIR_ENV = "ATTNSUITE_RUN_DIR"  # set while a sweep runs: the folder the captures are cached in
CACHE_FOLDER = "model_inputs"  # <run folder>/model_inputs/<key>.safetensors


@contextlib.contextmanager
def run_folder(path: str | Path) -> Iterator[None]:
    """Cache captures under `path`/model_inputs while the block runs (the sweep's run folder); restores after."""
    before = os.environ.get(RUN_DIR_ENV)
    os.environ[RUN_DIR_ENV] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(RUN_DIR_ENV, None)
        else:
            os.environ[RUN_DIR_ENV] = before


def model_shape_reasons(path: str, layer: int, *, H: int, N: int, M: int, D: int, H_kv: int | None) -> list[str]:
    """Why the model at `path` cannot give q, k, v of this shape ([] if it can); the reasons name the model's values."""
    if not path:
        return ["needs the model's folder: write it as model:path=DIR (e.g. model:path=models/llama,layer=0)"]
    try:
        config = hf_model.load_config(path)
    except ValueError as exc:
        return [str(exc)]
    H_model, Hkv_model, D_model = model_heads(config)
    layers = int(config.num_hidden_layers)
    limit = getattr(config, "max_position_embeddings", None)
    reasons = []
    if (H, D) != (H_model, D_model) or (H_kv is not None and H_kv != Hkv_model):
        reasons.append(
            f"the model has H={H_model} heads, H_kv={Hkv_model} key/value heads and head_dim D={D_model}, the cell asks "
            f"H={H}, H_kv={H_kv if H_kv is not None else '?'}, D={D}; run with --heads {H_model} --kv-heads {Hkv_model} "
            f"--head-dims {D_model}"
        )
    if not 0 <= layer < layers:
        reasons.append(f"layer={layer} is not one of the model's layers 0..{layers - 1}")
    if M != N:
        reasons.append(f"a model's activations are self-attention, so kv_len must equal seq_len, got N={N}, M={M}")
    if limit and N > int(limit):
        reasons.append(f"seq_len N={N} is beyond the model's max_position_embeddings {limit}")
    return reasons


def model_heads(config) -> tuple[int, int, int]:
    """(H, H_kv, D) of a transformers config: the shape every capture of the model has."""
    H = int(config.num_attention_heads)
    return (
        H,
        int(getattr(config, "num_key_value_heads", None) or H),
        int(getattr(config, "head_dim", None) or config.hidden_size // H),
    )


def model_input_reasons(
    B: int,
    H: int,
    N: int,
    M: int,
    D: int,
    *,
    kv_heads: int | None = None,
    path: str = "",
    layer: int = 0,
    text: str = "",
    tokenizer: str = "model",
) -> list[str]:
    """The shape check of the `model` input (its params as given): the model's shape, its text, its tokenizer."""
    reasons = model_shape_reasons(path, layer, H=H, N=N, M=M, D=D, H_kv=kv_heads)
    if text:
        try:
            _text_fingerprint(text)
        except UsageError as exc:
            reasons.append(str(exc))
    if tokenizer not in hf_model.TOKENIZERS:
        reasons.append(f"tokenizer={tokenizer!r}: expected one of {', '.join(hf_model.TOKENIZERS)}")
    return reasons


@register_inputs("model", availability=hf_adapter.missing_transformers_reason, shape_check=model_input_reasons)
def model(
    B: int,
    H: int,
    N: int,
    M: int,
    D: int,
    *,
    generator,
    device,
    path: str = "",
    layer: int = 0,
    text: str = "",
    tokenizer: str = "model",
    kv_heads: int | None = None,
) -> QKV:
    """q, k, v a transformers model's layer receives on real text (path=DIR, layer=i): its own H, H_kv, D; extra [hf]."""
    starts = torch.randint(0, 2**62, (B,), generator=generator, device=generator.device).tolist()
    q, k, v = captured(path, layer, text, N, starts, tokenizer=tokenizer)
    if kv_heads is None and k.shape[1] != H:  # the caller keeps every G-th K/V head: give each group's its own
        k, v = (t.repeat_interleave(H // k.shape[1], dim=1) for t in (k, v))
    return q.to(device), k.to(device), v.to(device)


def captured(path: str, layer: int, text: str, N: int, starts: list[int], *, tokenizer: str = "model") -> QKV:
    """The layer's (q, k, v), float32 on the CPU, for windows at `starts`: from the run folder's cache, or the model.

    A cached file is used only when its recorded key (model and text fingerprints, layer, N, window starts) is this
    call's and its tensors have this call's shape (B, N and the model's H, H_kv, D) and dtype; any other file is
    captured again and replaced.
    """
    from safetensors import safe_open  # the [hf] extra: imported where a capture is asked for
    from safetensors.torch import save as safetensors_bytes

    folder = os.environ.get(RUN_DIR_ENV)
    key = capture_key(path, layer, text, N, starts) + ("" if tokenizer == "model" else f" tokenizer={tokenizer}")
    file = (
        Path(folder) / CACHE_FOLDER / f"{hashlib.sha1(key.encode()).hexdigest()[:16]}.safetensors" if folder else None
    )
    if file is not None and file.is_file():
        heads = model_heads(hf_model.load_config(path))
        cached = _cached_capture(safe_open, file, key, B=len(starts), N=N, heads=heads)
        if cached is not None:
            return cached
    stream = _stream(path, text, tokenizer)
    split = len(stream) * 3 // 4  # the first three quarters: model-eval calibrates on the last
    if split < N + 1:
        raise ValueError(f"inputs 'model': the text has {len(stream)} tokens, too few for windows of N={N}")
    ids = torch.tensor([stream[s % (split - N) : s % (split - N) + N] for s in starts])  # (B, N)
    net = _model(path)
    with torch.no_grad():
        q, k, v = hf_model.capture_qkv(net, lambda: net(input_ids=ids, use_cache=False), layers=[layer])[0]
    q, k, v = (t.float().contiguous() for t in (q, k, v))
    if file is not None:
        file.parent.mkdir(parents=True, exist_ok=True)
        write_plain(file, safetensors_bytes({"q": q, "k": k, "v": v}, metadata={"key": key}))  # never through a link
    return q, k, v


def capture_key(path: str, layer: int, text: str, N: int, starts: list[int]) -> str:
    """What a capture depends on: the model's files and the text (fingerprints, not names), the layer, N, the starts."""
    return json.dumps([_model_fingerprint(path), layer, _text_fingerprint(text), N, starts])


def _cached_capture(safe_open, file: Path, key: str, *, B: int, N: int, heads: tuple[int, int, int]) -> QKV | None:
    """The cached (q, k, v) when `file` records `key` and holds float32 tensors of the model's shape (`heads`: its H,
    H_kv, D): q (B, H, N, D), k and v (B, H_kv, N, D); None otherwise."""
    try:
        with safe_open(str(file), framework="pt") as handle:
            if (handle.metadata() or {}).get("key") != key or set(handle.keys()) != {"q", "k", "v"}:
                return None
            q, k, v = (handle.get_tensor(name) for name in ("q", "k", "v"))
    except Exception:  # a truncated or foreign file (safetensors raises its own error types): captured again
        return None
    shapes_fit = all(t.dim() == 4 and t.shape[0] == B and t.shape[2] == N for t in (q, k, v))
    H, H_kv, D = heads
    heads_fit = (
        shapes_fit and q.shape[1] == H and q.shape[3] == D and k.shape == v.shape and k.shape[1:4:2] == (H_kv, D)
    )
    if not shapes_fit or not heads_fit or any(t.dtype != torch.float32 for t in (q, k, v)):
        return None
    return q, k, v


def _model_fingerprint(path: str) -> str:
    """The model folder's config and weight files, by content (config) and size and mtime (weights)."""
    folder = Path(path).resolve()
    digest = hashlib.sha1(str(folder).encode())
    for file in sorted(folder.glob("*")):
        if file.name == "config.json":
            digest.update(file.read_bytes())
        elif file.suffix in (".safetensors", ".bin", ".json", ".model"):
            info = file.stat()
            digest.update(f"{file.name}:{info.st_size}:{info.st_mtime_ns}".encode())
    return digest.hexdigest()


def _text_fingerprint(text: str) -> str:
    """The text file's content hash ('' for the default text, Python's documentation)."""
    return hashlib.sha1(read_user_text(text, what="inputs 'model' text=").encode()).hexdigest() if text else ""


@functools.lru_cache(maxsize=2)
def _model(path: str) -> torch.nn.Module:
    return hf_model.load_pretrained(path)


@functools.lru_cache(maxsize=4)
def _stream(path: str, text: str, tokenizer: str) -> tuple[int, ...]:
    body = read_user_text(text, what="inputs 'model' text=") if text else "\n\n".join(corpus())
    vocab_size = int(hf_model.load_config(path).vocab_size)
    return tuple(hf_model.token_ids(path, body, vocab_size, tokenizer=tokenizer)[0])
