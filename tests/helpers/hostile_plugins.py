"""Misbehaving plugins for tests/harness/test_hostile_integrity.py, as source text: each is written to a file of its
own by the test that needs it (so nothing registers at collection time and each misbehaviour is imported alone)."""

from __future__ import annotations

HEADER = """
import os, sys, time
import torch
from variants import AttentionVariant, Capabilities, register_variant
from variants.reference import reference_attention


def exact(q, k, v, causal):
    return reference_attention(q, k, v, causal=causal, dtype=None)
"""

# name -> the body after HEADER; each registers one variant named like the key (the import-time ones none)
PLUGINS = {
    # writes into k and v, returns exact attention of what it was given: its own row and the next cells' were false
    "h_writes": """
@register_variant("h_writes")
class Writes(AttentionVariant):
    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        out = exact(q, k, v, causal)
        k.data.mul_(3.0)  # .data: past autograd's own guard in train mode
        v.data.zero_()
        return out
""",
    # overwrites its inputs, then returns exact attention of the overwritten ones: rel_l2 0.0 against a late reference
    "h_cheats": """
@register_variant("h_cheats")
class Cheats(AttentionVariant):
    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        q.data.fill_(0.5)
        return exact(q, k, v, causal)
""",
    # exact on its first call, zeros on every later one (the timed calls)
    "h_first": """
@register_variant("h_first")
class FirstOnly(AttentionVariant):
    calls = 0

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        type(self).calls += 1
        return exact(q, k, v, causal) if type(self).calls == 1 else q * 0.0  # keeps the graph: train mode runs too
""",
    # decodes right from its first state only: every later generation's steps return zeros (the timed ones)
    "h_decode_first": """
from variants.dense import DenseAttention, DenseConfig


@register_variant("h_decode_first", config=DenseConfig)
class DecodesFirstOnly(DenseAttention):
    states = 0

    def init_state(self, k, v, *, kv_mask=None):
        type(self).states += 1
        return super().init_state(k, v, kv_mask=kv_mask)

    def step(self, q_t, k_t, v_t, state):  # right from the states a cell prepares and checks with (its prepare's
        out, state = super().step(q_t, k_t, v_t, state)  # throwaway step's and the checked generation's), not after
        return (out if type(self).states <= 2 else out * 0.0), state
""",
    "h_interrupt": """
@register_variant("h_interrupt")
class Interrupts(AttentionVariant):
    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        raise KeyboardInterrupt
""",
    "h_exit0": """
@register_variant("h_exit0")
class ExitsZero(AttentionVariant):
    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        os._exit(0)
""",
    # swallows the cell's timeout (and any other exception) and keeps going
    "h_swallow": """
@register_variant("h_swallow")
class Swallows(AttentionVariant):
    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        while True:
            try:
                time.sleep(0.05)
            except BaseException:
                pass
""",
    # an honest plugin: its cells share one child process
    "h_exact": """
@register_variant("h_exact")
class Exact(AttentionVariant):
    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return exact(q, k, v, causal)
""",
    "h_import_exit": "sys.exit(3)\n",
    "h_import_base": "class Boom(BaseException):\n    pass\n\n\nraise Boom('at import')\n",
    "h_dense": """
@register_variant("dense")
class NotDense(AttentionVariant):
    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return exact(q, k, v, causal)
""",
}


def write_plugin(folder, name: str):
    """Write plugin `name` to FOLDER/<name>.py and return its path."""
    path = folder / f"{name}.py"
    path.write_text(HEADER + PLUGINS[name], encoding="utf-8")
    return path
