"""docs/accuracy.md's table of the model features each built-in honours matches the registry: every built-in has a row,
and each cell's first word (yes / refused) is what its Capabilities, its `windowed` and its decode state say."""

from __future__ import annotations

import re

import torch

from tests.helpers import REPO
from variants import build_variant, get_variant, list_variants

HEADER = "| built-in | generate() over the KV cache (causal offset) |"


def _table() -> dict[str, list[str]]:
    """The table's rows: variant name -> its cells after the name."""
    text = (REPO / "docs" / "accuracy.md").read_text(encoding="utf-8")
    lines = text[text.index(HEADER) :].splitlines()
    rows = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[re.fullmatch(r"`(\w+)`", cells[0]).group(1)] = cells[1:]
    return rows


def _state_memory(variant) -> str:
    """'constant' when the decode state's bytes after an 8-token and a 64-token context are equal, else 'growing'."""
    sizes = []
    for N in (8, 64):
        k = torch.randn(1, 2, N, 16)  # (B, H_kv, N, D)
        with torch.no_grad():
            sizes.append(variant.state_bytes(variant.init_state(k, k)))
    return "constant" if sizes[0] == sizes[1] else "growing"


def _expected(name: str) -> list[str]:
    cls = get_variant(name).cls
    caps = cls.capabilities
    torch.manual_seed(0)
    variant = build_variant(name, **cls.small_config)
    flags = [
        caps.causal and caps.causal_offset,
        variant.windowed(8) is not None,
        caps.softcap,
        caps.sink_logits,
        caps.causal and caps.decode,
    ]
    words = ["yes" if flag else "refused" for flag in flags]
    if flags[-1]:
        words[-1] = f"yes {_state_memory(variant)}"
    return words


def test_the_features_table_matches_the_registry():
    rows = _table()
    built_ins = sorted(n for n in list_variants() if get_variant(n).cls.__module__.startswith("variants."))
    assert sorted(rows) == built_ins
    for name in built_ins:
        cells = rows[name]
        found = [re.match(r"(yes|refused)", cell).group(1) for cell in cells]
        if found[-1] == "yes":  # the state path's cell says whether the state's memory is constant
            found[-1] += " constant" if "constant memory" in cells[-1] else " growing"
        assert found == _expected(name), f"docs/accuracy.md's row for {name}: {cells}"
