"""`python -m harness list`: every registered variant, its backends and whether each runs here."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

import torch

from harness.devices import check_device
from harness.errors import UsageError
from harness.plugins import load_plugins
from variants import get_variant, list_variants


def describe(name: str, device: str) -> dict:
    """A variant's spec as plain data, with each backend's availability on `device`."""
    spec = get_variant(name)
    attn = spec.cls()
    probe = torch.empty(1, 1, 1, 1, device=device)
    backends = {}
    for backend in spec.backends:
        forward = attn.backend_reasons(backend, probe, training=False)
        train = attn.backend_reasons(backend, probe, training=True)
        backends[backend] = {"forward": forward or "available", "train": train or "available"}
    return {
        "name": name,
        "description": spec.description,
        "module": spec.module,
        "capabilities": asdict(spec.capabilities),
        "backends": backends,
        "config": {f.name: {"type": f.type, "default": f.default} for f in spec.fields},
        "quality_knob": None if spec.quality_knob is None else asdict(spec.quality_knob),
        "length_fields": list(spec.cls.length_fields),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pattern", nargs="?", default="*", help="glob over variant names (default: all)")
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="device to check backends on"
    )
    parser.add_argument(
        "--plugin", action="append", default=[], metavar="MODULE_OR_FILE", help="import a user's variants first"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    load_plugins(args.plugin)
    args.device = check_device(args.device)
    names = list_variants(args.pattern)
    if not names:
        raise UsageError(f"no variant matches {args.pattern!r}; available: {', '.join(list_variants())}")
    described = [describe(n, args.device) for n in names]
    if args.json:
        print(json.dumps(described, indent=2, default=str))
        return 0
    for d in described:
        caps = d["capabilities"]
        flags = [name for name, value in caps.items() if value is True]  # every flag Capabilities declares, as set
        print(f"{d['name']}: {d['description']}")
        print(f"  capabilities: {', '.join(flags)}; devices: {', '.join(caps['devices'])}")
        if caps["approximates"]:
            print(f"  approximates: {caps['approximates']}")
        for backend, status in d["backends"].items():
            parts = [
                f"{mode}: {'yes' if s == 'available' else 'no (' + '; '.join(s) + ')'}" for mode, s in status.items()
            ]
            print(f"  backend {backend} on {args.device}: {', '.join(parts)}")
        fields = ", ".join(f"{k}={v['default']!r}" for k, v in d["config"].items()) or "(none)"
        print(f"  config: {fields}")
        knob = d["quality_knob"]
        if knob:
            print(f"  quality knob: {knob['field']} from {knob['low']} to {knob['high']} (more: more accurate, slower)")
        if d["length_fields"]:
            print(f"  follows N in a sweep unless set: {', '.join(d['length_fields'])}")
    return 0
