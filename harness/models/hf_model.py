"""A transformers model from a local folder (or the hub, where a user has it): load it, swap variants into its layers,
record the q, k, v its attention receives. Built on ``hf_adapter``; never runs a model's own code (no remote code).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import Tensor, nn

from harness.errors import UsageError
from harness.models import hf_adapter, hf_layers
from variants import AttentionVariant, NotSupportedError, build_variant

QKVList = list[tuple[Tensor, Tensor, Tensor]]


def load_pretrained(
    path: str,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    causal_lm: bool | None = None,
) -> nn.Module:
    """The model at `path` with transformers' own attention (SDPA where it has it, else eager), in eval mode.

    causal_lm: load with AutoModelForCausalLM (True) or AutoModel (False); None decides from the config
    (a decoder whose architecture ends in ForCausalLM). Raises ImportError without transformers,
    ValueError when transformers cannot load it (the reason), never runs code shipped with a model.
    """
    reason = hf_adapter.missing_transformers_reason()
    if reason:
        raise ImportError(reason)
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()  # its load report: what it reports is refused below, in one line
    try:
        config = transformers.AutoConfig.from_pretrained(path, trust_remote_code=False)
        if causal_lm is None:
            causal_lm = is_causal_lm(config)
        auto = transformers.AutoModelForCausalLM if causal_lm else transformers.AutoModel
        model, info = auto.from_pretrained(path, dtype=dtype, trust_remote_code=False, output_loading_info=True)
    except Exception as exc:  # safetensors raises its own error types for a truncated or garbage file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"transformers cannot load the model {path!r}: {first}") from None
    _refuse_partial(path, info)
    return model.to(device).eval()


def _refuse_partial(path: str, info: dict[str, Any]) -> None:
    """UsageError when transformers reports weights missing (it would initialise them at random), unexpected (another
    architecture's) or of another shape; what it ties or ignores by itself is not reported, so never refused."""
    for kind, meaning in (
        ("missing_keys", "missing (transformers would initialise them at random)"),
        ("unexpected_keys", "unexpected (a checkpoint of another architecture?)"),
        ("mismatched_keys", "of another shape than the config's"),
    ):
        keys = sorted(str(key[0] if isinstance(key, tuple) else key) for key in info.get(kind) or ())
        if keys:
            shown = ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")
            raise UsageError(
                f"the model {path!r} is not whole: {len(keys)} weights {meaning}: {shown}; "
                "pass a complete checkpoint of the architecture its config.json names"
            )


def load_config(path: str) -> Any:
    """The model's transformers config, without its weights; ValueError with transformers' reason when it cannot."""
    import transformers

    try:
        return transformers.AutoConfig.from_pretrained(path, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"transformers cannot load the model {path!r}: {first}") from None


def is_causal_lm(config: Any) -> bool:
    """Whether a transformers config describes a causal LM (next-token logits), else an encoder: an architecture that
    ends in ForCausalLM or is one of transformers' causal-LM classes (GPT2LMHeadModel), or a decoder config."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # the optional [hf] extra

    causal = {
        n
        for names in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()
        for n in ([names] if isinstance(names, str) else names)
    }
    architectures = getattr(config, "architectures", None) or []
    if any(a.endswith("ForCausalLM") or a in causal for a in architectures):
        return True
    return bool(getattr(config, "is_decoder", False)) or (not architectures and hasattr(config, "rope_theta"))


def attention_shape(model: nn.Module) -> dict[str, int]:
    """The model's attention shape from its config: layers, heads H, key/value heads H_kv, head_dim D."""
    config = model.config
    H = int(config.num_attention_heads)
    H_kv = int(getattr(config, "num_key_value_heads", None) or H)
    D = int(getattr(config, "head_dim", None) or config.hidden_size // H)
    return {"layers": hf_layers.layer_count(model), "H": H, "H_kv": H_kv, "D": D}


def swap_layers(
    model: nn.Module,
    make_variant: Callable[[int], AttentionVariant],
    *,
    layers: Iterable[int] | None = None,
) -> nn.Module:
    """Run every attention layer through the adapter: `make_variant(i)` in the layers listed (default all; i the
    model's layer index), exact `dense` in the others. Returns the model (changed in place). NotSupportedError for a
    model that computes attention itself (ALiBi); use `swapped` to have every forward checked."""
    reason = hf_layers.unswappable_reason(model)
    if reason:
        raise NotSupportedError(reason)
    modules = hf_layers.attention_modules(model)
    chosen = set(modules if layers is None else layers)
    model.set_attn_implementation(hf_adapter.register_with_transformers("dense"))
    device = next(model.parameters()).device
    for index, module in modules.items():
        variant = make_variant(index) if index in chosen else build_variant("dense")
        hf_layers.set_layer_variant(module, variant.to(device))
    return model


@contextlib.contextmanager
def swapped(
    model: nn.Module,
    make_variant: Callable[[int], AttentionVariant],
    *,
    layers: Iterable[int] | None = None,
) -> Iterator[nn.Module]:
    """The model swapped as `swap_layers` does for the block, its own attention after; every forward inside raises
    NotSupportedError (the model's class, the layers the variant ran in) unless each layer ran its variant."""
    before = model.config._attn_implementation
    try:
        swap_layers(model, make_variant, layers=layers)
        with hf_layers.checked_forwards(model):
            yield model
    finally:
        if model.config._attn_implementation != before:
            model.set_attn_implementation(before)


@torch.no_grad()
def capture_qkv(model: nn.Module, run: Callable[[], Any], *, layers: Iterable[int] | None = None) -> QKVList:
    """The (q, k, v) each attention layer (all, or `layers` in order: the model's layer indices) receives while `run()`
    runs the model once, through the adapter's exact `dense` in every layer (checked: NotSupportedError otherwise).

    q is (B, H, N, D) as the variant gets it (pre-scaled for a non-default scaling); k, v (B, H_kv, N, D).
    """
    modules = hf_layers.attention_modules(model)
    indices = list(range(hf_layers.layer_count(model)) if layers is None else layers)
    records: list[QKVList] = [[] for _ in indices]
    try:
        with swapped(model, lambda i: build_variant("dense")):
            for index, record in zip(indices, records):
                if index in modules:  # else the checked forward refuses the model, naming the layers that ran
                    hf_adapter.record_qkv(modules[index], record)
            run()
    finally:
        for module in modules.values():
            hf_adapter.record_qkv(module, None)
    return [record[0] for record in records]


TOKENIZERS = ("model", "bytes")  # the model's own tokenizer (default), or the text's UTF-8 bytes when asked for
TOKENIZER_RECORDED = {"model": "the model's", "bytes": "bytes"}  # what the results' `tokenizer` field says


def token_ids(path: str, text: str, vocab_size: int, *, tokenizer: str = "model") -> tuple[list[int], str]:
    """The text's token ids under the model's own tokenizer (tokenizer="model"), or its UTF-8 bytes modulo vocab_size
    (tokenizer="bytes", asked for: tiny test models have none). Returns (ids, the tokenizer's class or "bytes").

    Raises ValueError naming the folder and transformers' reason when the model's tokenizer does not load.
    """
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"tokenizer {tokenizer!r}: expected one of {', '.join(TOKENIZERS)}")
    if tokenizer == "bytes":
        return [b % vocab_size for b in text.encode("utf-8")], "bytes"
    import transformers

    transformers.utils.logging.set_verbosity_error()  # "sequence longer than the model's maximum": windows cut it
    try:
        loaded = transformers.AutoTokenizer.from_pretrained(path, trust_remote_code=False)
        ids = list(loaded(text, add_special_tokens=False)["input_ids"])
    except Exception as exc:  # tokenizers raises its own error types for a broken tokenizer.json
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"the tokenizer in {path!r} does not load: {first}; {_BYTES_HINT}") from None
    if text.strip() and not ids:  # a tokenizer class without its files (Qwen2's): transformers builds an empty one
        raise ValueError(f"the tokenizer in {path!r} gives no tokens for the text (its files missing?); {_BYTES_HINT}")
    return ids, type(loaded).__name__


_BYTES_HINT = (
    "fix the folder's tokenizer files, or ask for UTF-8 bytes (model-eval --tokenizer bytes; model:tokenizer=bytes)"
)


def token_windows(stream: list[int], N: int, count: int, *, calibration: bool) -> list[list[int]]:
    """`count` windows of N consecutive tokens: evaluation ones from the first 3/4 of the stream, calibration ones
    from the last 1/4, so the two never share a token. Raises ValueError when that part is too short."""
    split = len(stream) * 3 // 4
    part = stream[split:] if calibration else stream[:split]
    fits = len(part) // N if N > 0 else 0
    if count > fits:
        which = "calibration (last quarter)" if calibration else "evaluation (first three quarters)"
        raise ValueError(
            f"the text's {which} part has {len(part)} tokens: {fits} windows of {N}, asked for {count}; "
            "pass a longer --text FILE or fewer --texts / --calibration-texts"
        )
    return [part[i * N : (i + 1) * N] for i in range(count)]
