"""Which layers of a transformers model run attnsuite's adapter: its attention modules by the model's own layer index,
each layer's variant, and the per-forward tally that refuses a model where the variant did not run in every layer.

transformers' attention modules keep ``is_causal`` and their ``layer_idx`` and call the attention interface whatever
their projections are called (q_proj, query, query_key_value, qkv_proj, c_attn). A model that computes attention
itself (ALiBi models: Bloom, MPT) never reaches the adapter: refused by name before it runs, and by the tally after
any forward in which the variant ran in fewer layers than the model has, so no number comes from a model that was not
swapped.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from torch import nn

from variants import AttentionVariant, NotSupportedError

LAYER_VARIANT = "_attnsuite_variant"  # attribute of an attention module: the variant of that layer
ALIBI = ("bloom", "mpt")  # model types whose ALiBi attention bypasses transformers' attention interface
_TALLIES: list[
    dict[nn.Module, AttentionVariant]
] = []  # open per-forward tallies (innermost last): module -> its variant


def attention_modules(model: nn.Module) -> dict[int, nn.Module]:
    """The model's attention modules by the model's layer index (``layer_idx``); numbered in order where none has one
    (some encoders). A second module with the same index (cross-attention) is not listed: the tally refuses it."""
    found = [module for module in model.modules() if hasattr(module, "is_causal")]
    indexed = [m for m in found if isinstance(getattr(m, "layer_idx", None), int)]
    if not indexed:
        return dict(enumerate(found))
    modules: dict[int, nn.Module] = {}
    for module in indexed:
        modules.setdefault(int(module.layer_idx), module)
    return dict(sorted(modules.items()))


def layer_count(model: nn.Module) -> int:
    """The model's layers: its config's num_hidden_layers, else the attention modules found."""
    return int(getattr(model.config, "num_hidden_layers", 0) or 0) or len(attention_modules(model))


def set_layer_variant(module: nn.Module, variant: AttentionVariant | None) -> None:
    """Give one attention module its own variant (a per-layer fit); None returns it to the registered one."""
    module.__dict__[LAYER_VARIANT] = variant  # not a submodule: the model's state_dict stays the model's


def unswappable_reason(model: nn.Module) -> str | None:
    """Why no variant can be swapped into this model (it computes attention itself), or None."""
    model_type = getattr(model.config, "model_type", None)
    if model_type in ALIBI:
        return (
            f"{type(model).__name__} ({model_type}) computes its ALiBi attention itself, never through transformers' "
            "attention interface, so no variant can be swapped into it; evaluate a model with RoPE or learned positions"
        )
    return None


def tally(module: nn.Module, variant: AttentionVariant) -> None:
    """Record that `module` ran `variant` through the adapter in the forward being tallied (if one is)."""
    if _TALLIES:
        _TALLIES[-1][module] = variant


@contextlib.contextmanager
def checked_forwards(model: nn.Module) -> Iterator[None]:
    """Inside the block, every forward of `model` (each of generate's steps too) is tallied and raises
    NotSupportedError (the model's class, the layers the variant ran in) unless it ran each layer's variant in all."""
    depth, modules = len(_TALLIES), attention_modules(model)  # found once per block, not walked per forward

    def open_tally(module: nn.Module, args: tuple) -> None:
        _TALLIES.append({})

    def close_tally(module: nn.Module, args: tuple, output: object) -> None:
        reasons = swap_reasons(model, modules, _TALLIES.pop())
        if reasons:
            raise NotSupportedError("; ".join(reasons))

    handles = (model.register_forward_pre_hook(open_tally), model.register_forward_hook(close_tally))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        del _TALLIES[depth:]  # a forward that raised left its tally open


def swap_reasons(model: nn.Module, modules: dict[int, nn.Module], ran: dict[nn.Module, AttentionVariant]) -> list[str]:
    """Why one forward's tally (module -> the variant it ran) is not the swapped model ([] if it is): each of the
    model's layers must have run its own variant (set_layer_variant) in its module (`modules`: attention_modules),
    and no other attention module the adapter."""
    L = layer_count(model)
    done = [i for i in range(L) if i in modules and _ran_its_own(modules[i], ran)]
    known = {id(module) for module in modules.values()}
    strays = sorted({type(m).__name__ for m in ran if id(m) not in known})
    reasons = []
    if len(done) < L:
        missing = [i for i in range(L) if i not in done]
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        why = unswappable_reason(model) or (
            "its attention did not call transformers' attention interface (attn_implementation) there"
        )
        reasons.append(
            f"{type(model).__name__}: the variant was called in {len(done)} of its {L} layers (not in layer "
            f"{shown}): {why}; attnsuite cannot evaluate this model"
        )
    if strays:
        reasons.append(
            f"{type(model).__name__}: attention modules outside the model's numbered layers called the adapter "
            f"({', '.join(strays)}: cross-attention?), which attnsuite does not map; it cannot evaluate this model"
        )
    return reasons


def _ran_its_own(module: nn.Module, ran: dict[nn.Module, AttentionVariant]) -> bool:
    own = module.__dict__.get(LAYER_VARIANT)
    return own is not None and ran.get(module) is own
