"""What the swap count costs (docs/reliability.md, issue 40): time per forward of a tiny Llama (2 layers, hidden 64,
N=128, one thread) with exact dense swapped in, unchecked (hf_model.swap_layers) and checked (hf_model.swapped: the
per-forward tally and its check), interleaved.

    PYTHONPATH=. python scripts/swap_count_cost.py [--repeats 300]

Prints the median and the minimum of each and their ratio; on a loaded machine trust the minimum.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def main(argv: list[str]) -> int:
    from harness.models import hf_model
    from tests.helpers.tiny_hf import VOCAB, save_tiny
    from variants import build_variant

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = hf_model.load_pretrained(str(save_tiny(Path(tempfile.mkdtemp()), "llama")))
    ids = torch.randint(0, VOCAB, (1, 128), generator=torch.Generator().manual_seed(0))

    def forward_s() -> float:
        start = time.perf_counter()
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
        return time.perf_counter() - start

    unchecked, checked = [], []
    for _ in range(20):
        forward_s()
    for _ in range(args.repeats):
        hf_model.swap_layers(model, lambda i: build_variant("dense"))
        unchecked.append(forward_s())
        with hf_model.swapped(model, lambda i: build_variant("dense")):
            checked.append(forward_s())
    for how in (statistics.median, min):
        plain, counted = how(unchecked), how(checked)
        print(
            f"{how.__name__}: unchecked {plain * 1e3:.3f} ms, checked {counted * 1e3:.3f} ms, ratio {counted / plain:.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
