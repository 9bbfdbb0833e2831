"""The `llm` inputs' attention profile per head type: mass against distance and entropy (docs/figures/llm_profile.png).

    python scripts/llm_inputs_profile.py [--n 2048] [--seeds 8] [--out docs/figures/llm_profile.png]

Causal attention weights of `llm` inputs (H=16, D=64), over the second half's query rows, grouped by the head type
each head was drawn as; the published profiles it is compared with are in docs/accuracy.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from harness.inputs import make_inputs  # noqa: E402
from harness.inputs.llm import HEAD_TYPES, llm_head_types  # noqa: E402
from harness.measure.distribution import head_metrics  # noqa: E402
from variants import attention_weights  # noqa: E402


def profile(N: int, seeds: int, H: int = 16, D: int = 64) -> dict[str, dict[str, torch.Tensor]]:
    """Per head type: mass per distance bin (log2 bins; bin 0 = distance 0), the sink's mass, entropies per head."""
    edges = [0, 1] + [2**e for e in range(1, (N - 1).bit_length())] + [N]
    out: dict[str, dict[str, list]] = {t: {"mass": [], "entropy": [], "sink": []} for t in HEAD_TYPES}
    for seed in range(seeds):
        q, k, _ = make_inputs("llm", B=1, H=H, N=N, D=D, seed=seed)
        types = llm_head_types(1, H, generator=torch.Generator().manual_seed(seed), device="cpu")[0]
        w = attention_weights(q, k, causal=True)[0, :, N // 2 :].float()  # (H, N/2, N)
        rows = torch.arange(N // 2, N)
        # entropy and the sink's mass as every report computes them (harness.measure.distribution)
        metrics = head_metrics(
            q, k, causal=True, rows=rows, valid=torch.ones(1, len(rows), dtype=torch.bool), chunk=128
        )
        dist = (torch.arange(N // 2, N)[:, None] - torch.arange(N)[None, :]).clamp(min=0)
        for h in range(H):
            kind = HEAD_TYPES[int(types[h])]
            bins = torch.stack(
                [(w[h] * ((dist >= lo) & (dist < hi))).sum(-1).mean() for lo, hi in zip(edges, edges[1:])]
            )
            out[kind]["mass"].append(bins)
            out[kind]["entropy"].append(float(metrics["entropy"][0, h]))
            out[kind]["sink"].append(float(metrics["first_1"][0, h]))
    return {
        t: {
            "edges": torch.tensor(edges),
            "mass": torch.stack(v["mass"]),
            **{k: torch.tensor(v[k]) for k in ("entropy", "sink")},
        }
        for t, v in out.items()
        if v["mass"]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--out", default="docs/figures/llm_profile.png")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = profile(args.n, args.seeds)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for kind, r in result.items():
        edges = r["edges"].float()
        centre = torch.cat([torch.tensor([0.5]), (edges[1:-1] * edges[2:]).sqrt()])  # distance 0 drawn at 0.5
        mass = r["mass"].mean(0)
        width = (edges[1:] - edges[:-1]).clamp(min=1)
        left.plot(
            centre,
            (mass / width).clamp_min(1e-7),
            marker="o",
            label=f"{kind} ({len(r['entropy'])} heads, sink mass {r['sink'].mean():.2f})",
        )
        print(
            f"{kind:9s} heads={len(r['entropy']):3d} entropy={r['entropy'].mean():.2f} sink={r['sink'].mean():.2f} "
            f"mass<16={float(mass[:5].sum()):.2f}"
        )
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("distance i - j (log2 bins; the sink at j = 0 is in the last bins)")
    left.set_ylabel("attention weight per key (mean over heads, rows)")
    left.set_title(f"`llm` inputs, N={args.n}: weight against distance per head type")
    left.legend(fontsize=8)
    right.boxplot([r["entropy"].numpy() for r in result.values()], tick_labels=list(result))
    right.axhline(
        float(torch.log(torch.tensor(args.n * 0.75))), ls="--", c="grey", label="uniform over the visible keys"
    )
    right.set_ylabel("entropy of a row's weights (nats)")
    right.set_title("entropy per head type")
    right.legend(fontsize=8)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
