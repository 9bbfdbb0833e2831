"""Seeded synthetic long-range tasks: multi-query associative recall (MQAR) and ListOps.

MQAR (Zoology, Arora et al. 2023): key-value pairs, then the keys again at random later
positions; at each such query the model must name the value paired with that key. Per-token
classification over the values; tokens that are not queries have no target. Zoology's two-token
form or a one-hop form (key and value on one position), see MQARSpec.

ListOps (Nangia & Bowman 2018; Long Range Arena, Tay et al. 2020): a nested expression of
MAX, MIN, MED (lower median), SM (sum mod 10) over digits, e.g. ``[MAX 2 9 [MIN 4 7 ] 0 ]``;
the answer (a digit) is one class per sequence. Sequences are padded to N with a mask.

Every batch comes from ``random.Random(seed)``: the same seed gives the same tokens everywhere.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from torch import Tensor

IGNORE = -100  # target of positions that are not scored (cross_entropy's ignore_index)


@dataclass(frozen=True)
class Batch:
    """One batch of a task: inputs, targets and the mask of real tokens."""

    tokens: Tensor  # (B, N) long
    targets: Tensor  # MQAR: (B, N) long, IGNORE where not scored; ListOps: (B,) long
    mask: Tensor  # (B, N) bool, True = real token
    values: Tensor | None = None  # (B, N) long or None: a second stream added to the embedding (one-hop MQAR), 0 = none


# ---- MQAR -----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class MQARSpec:
    """Sizes of an MQAR instance; tokens: 0 = filler, 1..K keys, K+1..K+V values.

    Zoology's form (one_hop=False) puts a pair on two positions, key then value: recalling needs
    two attention hops (value -> its key, then query -> that value), which a tiny model finds only
    after thousands of steps. The one-hop form puts key and value on one position (the value in a
    second stream whose embedding is added), so one content-based lookup at any distance recalls:
    the long-range retrieval this benchmark compares, learnable within a CPU budget.
    """

    seq_len: int  # N
    num_pairs: int  # P key-value pairs at the start (2P positions, P if one_hop), each key queried once later
    num_keys: int = 64  # K: distinct key tokens (P of them drawn per sequence, no repeats)
    num_values: int = 64  # V: distinct value tokens; chance accuracy is 1/V
    one_hop: bool = False  # True: key and value share one position (see above)

    def __post_init__(self) -> None:
        per_pair = 2 if self.one_hop else 3
        if self.num_pairs < 1 or per_pair * self.num_pairs > self.seq_len:
            raise ValueError(
                f"MQAR needs 1 <= num_pairs <= seq_len/{per_pair} (pairs plus one query each), got num_pairs="
                f"{self.num_pairs}, seq_len={self.seq_len}"
            )
        if self.num_pairs > self.num_keys:
            raise ValueError(f"MQAR num_pairs={self.num_pairs} exceeds num_keys={self.num_keys}: keys do not repeat")

    @property
    def vocab_size(self) -> int:
        return 1 + self.num_keys + self.num_values

    @property
    def num_classes(self) -> int:
        return self.num_values


def mqar_batch(spec: MQARSpec, batch: int, seed: int) -> Batch:
    """`batch` MQAR sequences; targets are value indices 0..V-1 at the query positions."""
    rng = random.Random(seed)
    N, P, K = spec.seq_len, spec.num_pairs, spec.num_keys
    tokens = torch.zeros(batch, N, dtype=torch.long)
    stream = torch.zeros(batch, N, dtype=torch.long)  # one-hop: 1 + value at the pair positions
    targets = torch.full((batch, N), IGNORE, dtype=torch.long)
    width = 1 if spec.one_hop else 2
    for b in range(batch):
        keys = rng.sample(range(K), P)
        values = [rng.randrange(spec.num_values) for _ in range(P)]
        for i, (key, value) in enumerate(zip(keys, values)):
            tokens[b, width * i] = 1 + key
            if spec.one_hop:
                stream[b, i] = 1 + value
            else:
                tokens[b, 2 * i + 1] = 1 + K + value
        slots = rng.sample(range(width * P, N), P)  # where the queries go, after all the pairs
        for (key, value), slot in zip(zip(keys, values), slots):
            tokens[b, slot] = 1 + key
            targets[b, slot] = value
    return Batch(tokens, targets, torch.ones(batch, N, dtype=torch.bool), stream if spec.one_hop else None)


# ---- ListOps --------------------------------------------------------------------------------
LISTOPS_OPS = ("MAX", "MIN", "MED", "SM")
PAD, CLOSE = 0, 1  # token ids; digits are 2..11, operators 12..15
DIGIT0, OP0 = 2, 12


@dataclass(frozen=True, kw_only=True)
class ListOpsSpec:
    """Sizes of a ListOps instance."""

    seq_len: int  # N: the longest expression (shorter ones are padded)
    max_depth: int = 10  # deepest nesting of operators
    max_args: int = 5  # most arguments of one operator

    def __post_init__(self) -> None:
        if self.seq_len < 4:
            raise ValueError(f"ListOps needs seq_len >= 4 (e.g. [MAX 1 2 ]), got {self.seq_len}")

    @property
    def vocab_size(self) -> int:
        return OP0 + len(LISTOPS_OPS)

    @property
    def num_classes(self) -> int:
        return 10


def listops_batch(spec: ListOpsSpec, batch: int, seed: int) -> Batch:
    """`batch` ListOps expressions of at most seq_len tokens, padded; targets are the answers 0..9."""
    rng = random.Random(seed)
    N = spec.seq_len
    tokens = torch.full((batch, N), PAD, dtype=torch.long)
    mask = torch.zeros(batch, N, dtype=torch.bool)
    targets = torch.empty(batch, dtype=torch.long)
    for b in range(batch):
        budget = rng.randint(max(4, N // 2), N)  # expressions take ~25-65% of N (they do not fill their budget)
        seq, value = _expression(rng, budget, spec.max_depth, spec.max_args)
        tokens[b, : len(seq)] = torch.tensor(seq)
        mask[b, : len(seq)] = True
        targets[b] = value
    return Batch(tokens, targets, mask)


def _expression(rng: random.Random, budget: int, depth: int, max_args: int) -> tuple[list[int], int]:
    """An operator expression of at most `budget` tokens (>= 4) and its value.

    The budget minus "[OP" and "]" is split at random among 2..max_args arguments; an argument
    with room for it (>= 4 tokens, depth left) is a nested expression with that room, mostly,
    else a digit, so expressions fill much of their budget and nest deeply.
    """
    op = rng.randrange(len(LISTOPS_OPS))
    inner = budget - 2
    n_args = rng.randint(2, max(2, min(max_args, inner)))
    cuts = sorted(rng.sample(range(1, inner), n_args - 1))  # a random composition of inner into n_args parts
    rooms = [b - a for a, b in zip([0] + cuts, cuts + [inner])]
    seq, args = [OP0 + op], []
    for room in rooms:
        if depth > 1 and room >= 4 and rng.random() < 0.9:
            sub, value = _expression(rng, room, depth - 1, max_args)
        else:
            value = rng.randrange(10)
            sub = [DIGIT0 + value]
        seq += sub
        args.append(value)
    seq.append(CLOSE)
    return seq, _apply(LISTOPS_OPS[op], args)


def _apply(op: str, args: list[int]) -> int:
    if op == "MAX":
        return max(args)
    if op == "MIN":
        return min(args)
    if op == "MED":
        return sorted(args)[(len(args) - 1) // 2]  # lower median: an integer for any count
    return sum(args) % 10


def listops_text(tokens: Tensor | list[int]) -> str:
    """An expression as text, e.g. '[MAX 2 9 [MIN 4 7 ] 0 ]' (padding dropped)."""
    words = []
    for t in tokens.tolist() if isinstance(tokens, Tensor) else tokens:
        if t == PAD:
            continue
        words.append("]" if t == CLOSE else str(t - DIGIT0) if t < OP0 else "[" + LISTOPS_OPS[t - OP0])
    return " ".join(words)


TASK_NAMES = ("mqar", "listops")
# ListOps is left out by default: at the cpu preset's budget every variant, dense included, scores 0.23-0.28 (its
# majority class), so it tells no variant apart; `--tasks mqar,listops --steps ...` runs it.
DEFAULT_TASKS = ("mqar",)
