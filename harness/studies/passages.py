"""model-eval's passages: the corpus cut at a length limit, each passage encoded alone, embedded and compared (AtLength).

The passages are CPython's documentation paragraphs (harness.models.minilm.corpus) joined in order up to a
length limit; every 4th calibrates, the others evaluate. Embeddings are compared by cosine and by top-1
retrieval agreement (the same nearest neighbour among the other passages).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from harness.models import minilm

Encoded = list[tuple[Tensor, Tensor]]  # per passage: (ids (1, N), mask (1, N))
LayerBatches = list[list[tuple[Tensor, Tensor, Tensor]]]  # per layer: the (q, k, v) of every calibration passage


def passages(max_len: int) -> list[str]:
    """Corpus paragraphs joined in order into passages of at most max_len - 2 word pieces each."""
    tokenizer = minilm.load_tokenizer()
    out, current, length = [], [], 0
    for text in minilm.corpus():
        n = len(tokenizer.tokens(text))
        if current and length + n > max_len - 2:
            out.append(" ".join(current))
            current, length = [], 0
        current.append(text)
        length += n
    if current:
        out.append(" ".join(current))
    return out


def split_passages(max_len: int, n_eval: int, n_calibration: int) -> tuple[list[str], list[str]]:
    """Disjoint (evaluation, calibration) passages: every 4th calibrates, the others evaluate.

    Raises ValueError when the corpus has fewer passages than asked for.
    """
    texts = passages(max_len)
    calibration = [t for i, t in enumerate(texts) if i % 4 == 3]
    evaluation = [t for i, t in enumerate(texts) if i % 4 != 3]
    if n_eval > len(evaluation) or n_calibration > len(calibration):
        raise ValueError(
            f"at max_len={max_len} the corpus makes {len(evaluation)} evaluation and {len(calibration)} calibration "
            f"passages; asked for {n_eval} and {n_calibration}: pass smaller --texts / --calibration-texts"
        )
    return evaluation[:n_eval], calibration[:n_calibration]


def encode_each(tokenizer: minilm.Tokenizer, texts: list[str], max_len: int, device: str) -> Encoded:
    """Each text alone as (ids (1, N), mask (1, N)): no padding, so every variant sees only real tokens."""
    return [tokenizer.encode([t], max_len=max_len, device=device) for t in texts]


@torch.no_grad()
def embed_all(model: minilm.MiniLM, encoded: Encoded) -> Tensor:
    """Sentence embeddings (len(encoded), E), float32."""
    return torch.cat([model.embed(ids, mask).float() for ids, mask in encoded])


def compare(reference: Tensor, candidate: Tensor) -> dict[str, float]:
    """Cosine of each embedding to its reference (mean, min) and top-1 retrieval agreement."""
    cosine = (reference * candidate).sum(-1) / (reference.norm(dim=-1) * candidate.norm(dim=-1)).clamp_min(1e-12)
    return {
        "cosine_mean": float(cosine.mean()),
        "cosine_min": float(cosine.min()),
        "retrieval_agreement": float((nearest(reference) == nearest(candidate)).float().mean()),
    }


def nearest(embeddings: Tensor) -> Tensor:
    """Index of each row's nearest other row by cosine, (n,)."""
    unit = embeddings / embeddings.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    sims = unit @ unit.T
    sims.fill_diagonal_(float("-inf"))
    return sims.argmax(-1)


def layer_batches(model: minilm.MiniLM, encoded: Encoded) -> LayerBatches:
    """For each layer, the (q, k, v) of every calibration passage under the unmodified model."""
    per_layer: LayerBatches = [[] for _ in model.layers]
    for ids, mask in encoded:
        for layer, qkv in zip(per_layer, model.capture_qkv(ids, mask)):
            layer.append(qkv)
    return per_layer


@dataclass
class AtLength:
    """What every variant at one length limit shares: the evaluation passages and the unmodified model's
    embeddings of them; the calibration passages' data is made on first use, once."""

    max_len: int
    device: str
    tokenizer: minilm.Tokenizer
    calibration_texts: list[str]
    evaluation: Encoded  # the evaluation passages, each encoded alone
    original: minilm.MiniLM  # the unmodified model
    reference: Tensor  # its embeddings of the evaluation passages
    cache: dict[str, Any] = field(default_factory=dict)

    def calibration(self) -> LayerBatches:
        """Each layer's (q, k, v) of the calibration passages under the unmodified model."""
        if "batches" not in self.cache:  # captured once per length, only if a learnable variant asks
            encoded = encode_each(self.tokenizer, self.calibration_texts, self.max_len, self.device)
            self.cache["batches"] = layer_batches(self.original, encoded)
        return self.cache["batches"]

    def calibration_reference(self) -> tuple[Encoded, Tensor]:
        """The calibration passages encoded and the unmodified model's embeddings of them (what budgets are searched on)."""
        if "passages" not in self.cache:
            self.cache["passages"] = encode_each(self.tokenizer, self.calibration_texts, self.max_len, self.device)
            self.cache["reference"] = embed_all(self.original, self.cache["passages"])
        return self.cache["passages"], self.cache["reference"]


def at_length(tokenizer: minilm.Tokenizer, max_len: int, n_eval: int, n_calibration: int, device: str) -> AtLength:
    """The passages at this length limit split, the evaluation ones encoded and embedded by the unmodified model."""
    evaluation, calibration_texts = split_passages(max_len, n_eval, n_calibration)
    encoded = encode_each(tokenizer, evaluation, max_len, device)
    original = minilm.load_model(device=device)
    return AtLength(max_len, device, tokenizer, calibration_texts, encoded, original, embed_all(original, encoded))
