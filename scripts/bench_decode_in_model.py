"""Decode tokens/s of each variant inside a tiny Llama (2 layers, 4 heads, 2 K/V heads of 16; random weights), over
transformers' KV cache and through VariantStateCache, as a ratio to dense over the KV cache, measured in one run.

    python scripts/bench_decode_in_model.py --context 1024 4096 --tokens 32 --repeats 3

Decode seconds: generate(prompt, T + 1 tokens) with a streamer noting each token's time, from the first new token (the
prefill's) to the last: T decode steps, each a model forward over one token (a CPU clock: perf_counter).
Rounds interleave every (variant, path), so machine load falls on all alike; the median over rounds is printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.models.hf_adapter import register_with_transformers  # noqa: E402
from harness.models.hf_decode_state import VariantStateCache  # noqa: E402
from variants import build_variant  # noqa: E402

VARIANTS = {
    "dense": {},
    "chunked": {},
    "sliding_window": {"window": 256},
    "distilled": {"features": 32},
    "window_linear": {"window": 64, "features": 32},
}


def tiny_llama(context: int) -> transformers.PreTrainedModel:
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context + 1024,
    )
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


class _Clock:
    """A generate() streamer that notes the time of each put: the prompt's, then each new token's."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: torch.Tensor) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def decode_seconds(model, ids: torch.Tensor, tokens: int, state: bool) -> float:
    """Seconds of `tokens` decode steps: from the first new token (after the prefill) to the last of tokens + 1."""
    clock = _Clock()
    cache = VariantStateCache(model) if state else None
    with torch.no_grad():
        model.generate(
            ids,
            max_new_tokens=tokens + 1,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            cache=cache,
            streamer=clock,
        )
    return clock.times[-1] - clock.times[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--context", type=int, nargs="+", default=[1024, 4096], help="prompt lengths")
    p.add_argument("--tokens", type=int, default=32, help="decode steps timed")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds (median)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    for context in args.context:
        model = tiny_llama(context)
        ids = torch.randint(0, 128, (1, context), generator=torch.Generator().manual_seed(0))
        torch.manual_seed(0)
        names = {name: register_with_transformers(build_variant(name, **cfg)) for name, cfg in VARIANTS.items()}
        runs = [(name, state) for name in VARIANTS for state in (False, True)]
        found: dict[tuple[str, bool], list[float]] = {run: [] for run in runs}
        for _ in range(args.repeats):
            for name, state in runs:
                model.set_attn_implementation(names[name])
                found[(name, state)].append(decode_seconds(model, ids, args.tokens, state))
        base = args.tokens / statistics.median(found[("dense", False)])
        for (name, state), seconds in found.items():
            speed = args.tokens / statistics.median(seconds)
            path = "state" if state else "kv-cache"
            print(f"context {context:5d}  {name:15s} {path:8s} {speed:8.1f} tokens/s  {speed / base:5.2f}x dense")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
