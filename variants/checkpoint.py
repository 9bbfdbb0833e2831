"""Save and load (fitted) variants: their registry name, config and parameters in one torch file."""

from __future__ import annotations

from pathlib import Path

import torch

from variants._registry import build_variant
from variants.base import AttentionVariant


def save_variant(variant: AttentionVariant, path: str | Path) -> Path:
    """Save a (fitted) variant as {"name", "config", "state_dict"} with torch.save; returns the path."""
    path = Path(path)
    state = {k: t.detach().cpu() for k, t in variant.state_dict().items()}
    torch.save({"format": 1, "name": variant.name, "config": variant.config.to_dict(), "state_dict": state}, path)
    return path


def load_variant(path: str | Path, *, into: AttentionVariant | None = None) -> AttentionVariant:
    """Load a variant saved by save_variant: a new one built from its config, or into `into`.

    `into` must be the same variant with the same config; otherwise ValueError names both.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no saved variant at {str(path)!r}; save one with save_variant(variant, path)")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or not {"name", "config", "state_dict"} <= set(ckpt):
        raise ValueError(f"{str(path)!r} is not a saved variant: expected a dict with name, config, state_dict")
    name, config = ckpt["name"], ckpt["config"]
    if into is None:
        into = build_variant(name, **config)
    elif into.name != name or into.config.to_dict() != config:
        mine = into.config.to_dict()
        diff = ", ".join(
            f"{f}: saved {config.get(f)!r}, given {mine.get(f)!r}"
            for f in sorted(set(config) | set(mine))
            if config.get(f) != mine.get(f)
        )
        raise ValueError(
            f"{str(path)!r} holds a {name!r} saved with config {config}; it cannot load into "
            f"{into.name!r} with config {mine} ({diff or 'different variant'}); "
            f"build the variant with the saved config or call load_variant(path) without into="
        )
    try:
        into.load_state_dict(ckpt["state_dict"])
    except RuntimeError as exc:
        raise ValueError(
            f"{str(path)!r}: the saved parameters do not fit {name!r} with config {config}: {exc}"
        ) from None
    return into
