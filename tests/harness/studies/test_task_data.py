"""harness.studies.task_data: MQAR and ListOps generators checked by independent solvers, seeded, errors that name the fix."""

from __future__ import annotations

import pytest
import torch

from harness.studies.task_data import IGNORE, ListOpsSpec, MQARSpec, listops_batch, listops_text, mqar_batch


# ---- independent solvers (they read the tokens, not the generators' internals) ------------------
def solve_mqar(tokens: list[int], num_keys: int, stream: list[int] | None = None) -> dict[int, int]:
    """Position -> value index for every query.

    Two-hop form: a key followed by a value token is a pair. One-hop form: a key whose second
    stream holds a value (1 + v) is a pair. Any other key is a query, answered from memory.
    """
    memory: dict[int, int] = {}
    answers: dict[int, int] = {}
    for i, t in enumerate(tokens):
        if not 1 <= t <= num_keys:
            continue
        if stream is not None:
            pair_value = stream[i] - 1 if stream[i] else None
        else:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else 0
            pair_value = nxt - 1 - num_keys if nxt > num_keys else None
        if t not in memory and pair_value is not None:
            memory[t] = pair_value
        else:
            answers[i] = memory[t]
    return answers


def solve_listops(text: str) -> int:
    """Evaluate '[MAX 2 [MIN 4 7 ] 0 ]' with an explicit stack (median: the lower one)."""
    stack: list[list] = []
    result = None
    for word in text.split():
        if word.startswith("["):
            stack.append([word[1:]])
        elif word == "]":
            op, *args = stack.pop()
            value = {
                "MAX": max,
                "MIN": min,
                "SM": lambda a: sum(a) % 10,
                "MED": lambda a: sorted(a)[(len(a) - 1) // 2],
            }[op](args)
            if stack:
                stack[-1].append(value)
            else:
                result = value
        else:
            stack[-1].append(int(word))
    assert not stack and result is not None, f"unbalanced expression {text!r}"
    return result


@pytest.mark.parametrize("one_hop", [False, True])
@pytest.mark.parametrize("N,P", [(32, 4), (96, 32), (256, 16)])
def test_mqar_answers_are_correct_by_construction(N, P, one_hop):
    spec = MQARSpec(seq_len=N, num_pairs=P, num_keys=64, num_values=32, one_hop=one_hop)
    batch = mqar_batch(spec, 16, seed=3)
    assert batch.tokens.shape == (16, N) and batch.mask.all()
    assert (batch.values is not None) == one_hop
    for b in range(16):
        stream = batch.values[b].tolist() if one_hop else None
        answers = solve_mqar(batch.tokens[b].tolist(), spec.num_keys, stream)
        scored = (batch.targets[b] != IGNORE).nonzero().flatten().tolist()
        assert sorted(answers) == scored and len(scored) == P
        assert all(batch.targets[b, i].item() == value for i, value in answers.items())


def test_mqar_is_seeded():
    spec = MQARSpec(seq_len=64, num_pairs=8)
    assert torch.equal(mqar_batch(spec, 4, 7).tokens, mqar_batch(spec, 4, 7).tokens)
    assert not torch.equal(mqar_batch(spec, 4, 7).tokens, mqar_batch(spec, 4, 8).tokens)


@pytest.mark.parametrize("N", [16, 64, 512])
def test_listops_answers_are_correct_by_construction(N):
    batch = listops_batch(ListOpsSpec(seq_len=N), 64, seed=5)
    lengths = batch.mask.sum(1)
    assert batch.tokens.shape == (64, N) and int(lengths.max()) <= N
    assert torch.equal(batch.mask, batch.tokens != 0)  # the mask marks exactly the non-padding tokens
    for b in range(64):
        assert solve_listops(listops_text(batch.tokens[b])) == batch.targets[b].item()
    if N >= 64:  # nesting really happens: some expressions have an operator inside an operator
        assert any(listops_text(batch.tokens[b]).count("[") > 2 for b in range(64))
    assert len(set(batch.targets.tolist())) >= 5


def test_spec_errors_name_the_fix():
    with pytest.raises(ValueError, match=r"num_pairs <= seq_len/3.*num_pairs=30, seq_len=64"):
        MQARSpec(seq_len=64, num_pairs=30)
    with pytest.raises(ValueError, match=r"num_pairs <= seq_len/2.*num_pairs=33, seq_len=64"):
        MQARSpec(seq_len=64, num_pairs=33, one_hop=True)
    with pytest.raises(ValueError, match=r"num_pairs=40 exceeds num_keys=16"):
        MQARSpec(seq_len=128, num_pairs=40, num_keys=16)
    with pytest.raises(ValueError, match=r"seq_len >= 4"):
        ListOpsSpec(seq_len=3)
