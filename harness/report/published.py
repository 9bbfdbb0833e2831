"""The report's "Published numbers beside ours": our rows next to the papers', and the papers' numbers themselves.

The numbers are data only, never used as expected values: a report shows "the paper saw X on <hardware>; we see Y
on <our hardware>". Sources as cited; the numbers were transcribed from the project's ANCHORS notes.
"""

from __future__ import annotations

import pandas as pd

from harness.report import analysis
from harness.report.render import Block, Heading, Paragraph, Table, format_number, format_ratio
from harness.store import COL

# Linformer (Wang et al. 2020), Table 3: inference speed-up over the Transformer, NVIDIA V100.
LINFORMER_SPEEDUP = {
    "source": "Linformer (Wang et al. 2020), Table 3",
    "hardware": "NVIDIA V100",
    "mode": "forward",
    # (sequence length n, projected length k) -> speed-up over the standard Transformer
    "speedup": {
        (2048, 128): 2.6,
        (2048, 256): 2.4,
        (2048, 512): 2.1,
        (4096, 128): 3.4,
        (4096, 256): 3.2,
        (4096, 512): 2.8,
        (8192, 128): 5.5,
        (8192, 256): 5.0,
        (8192, 512): 4.4,
        (16384, 128): 8.6,
        (16384, 256): 7.8,
        (16384, 512): 7.0,
        (65536, 128): 20.0,
        (65536, 256): 18.0,
        (65536, 512): 16.0,
    },
}

# Rabe & Staats 2021, "Self-attention does not need O(n^2) memory": extra memory, TPU v3, one head, n = 16384.
RABE_STAATS_MEMORY = {
    "source": "Rabe & Staats 2021",
    "hardware": "TPU v3",
    "seq_len": 16384,
    # mode -> (standard attention bytes, chunked bytes): 1 GB vs 17 MB (59x), 2.0 GB vs 64 MB (32x)
    "bytes": {"forward": (1e9, 17e6), "train": (2.0e9, 64e6)},
    "ratio": {"forward": 59.0, "train": 32.0},
}

# FlashAttention-2 on H100, forward+backward TFLOP/s, head dim 128 (the FA2 paper's benchmark figure).
FLASH2_TFLOPS = {
    "source": "FlashAttention-2 (Dao 2023), H100 benchmark",
    "hardware": "NVIDIA H100",
    "mode": "train",
    "head_dim": 128,
    "seq_lens": (512, 1024, 2048, 4096, 8192, 16384),
    "tflops": {
        False: (248.0, 294.0, 320.0, 326.0, 335.0, 338.0),  # non-causal
        True: (163.0, 221.0, 265.0, 294.0, 308.0, 328.0),  # causal
    },
    "naive_pytorch": "naive PyTorch attention on the same H100: 93 to 167 TFLOP/s, out of memory at 16K",
}


def published_comparison(frame: pd.DataFrame, env: dict) -> list[Block]:
    """Linformer speed-ups, chunked memory savings and dense TFLOP/s beside the published ones: a table only where both
    our number and the paper's exist, with each side's baseline named."""
    ours = env.get("gpu") or env.get("cpu") or "this machine"
    ok = frame[(frame[COL.status] == "ok") & (frame[COL.inputs] == analysis.primary_inputs(frame))]
    blocks: list[Block] = [
        Heading(2, "Published numbers beside ours"),
        Paragraph(
            f"Ours: {ours}. The papers measured other hardware, sizes and software; these put orders of magnitude "
            "side by side, they are not pass/fail checks."
        ),
    ]
    found = [_linformer(ok, ours), _chunked_memory(ok, ours), _dense_tflops(ok, ours)]
    for section in found:
        blocks += section
    if not any(found):
        blocks.append(
            Paragraph(
                "No cell of this run matches a published comparison (linformer forward, chunked memory, dense train TFLOP/s)."
            )
        )
    return blocks


def _linformer(ok: pd.DataFrame, ours: str) -> list[Block]:
    lin = LINFORMER_SPEEDUP
    rows = []
    for _, r in (
        ok[(ok[COL.variant] == "linformer") & (ok[COL.mode] == "forward")]
        .sort_values([COL.series, COL.seq_len])
        .iterrows()
    ):
        k = r[COL.config].get("k") if isinstance(r[COL.config], dict) else None
        paper = lin["speedup"].get((int(r[COL.seq_len]), k))
        if paper and _measured(r["dense_speedup"]):
            rows.append([r[COL.series], str(r[COL.seq_len]), str(k), format_ratio(r["dense_speedup"]), f"{paper:g}x"])
    if not rows:
        return []
    return [
        Heading(3, f"Linformer speed-up over dense, forward ({lin['source']}, {lin['hardware']})"),
        Table(["series", "N", "k", f"ours ({ours})", f"paper ({lin['hardware']})"], rows),
        Paragraph(
            f"Baselines: ours is the dense row of the same cell ({_dense_backends(ok)}), attention alone; the "
            "paper's is the standard Transformer with textbook N x N attention. Only (N, k) pairs the paper "
            "reports are shown."
        ),
    ]


def _chunked_memory(ok: pd.DataFrame, ours: str) -> list[Block]:
    rs = RABE_STAATS_MEMORY
    rows = []
    for mode in ("forward", "train"):
        part = ok[(ok[COL.variant] == "chunked") & (ok[COL.mode] == mode) & ok["memory_ratio"].notna()]
        if len(part) and mode in rs["ratio"]:
            best = part.sort_values(COL.seq_len).iloc[-1]
            rows.append(
                [
                    mode,
                    str(best[COL.seq_len]),
                    _dense_backends(ok[ok[COL.mode] == mode]),
                    format_number(1 / best["memory_ratio"], ".3g", "x"),
                    f"{rs['seq_len']}",
                    f"{rs['ratio'][mode]:g}x",
                ]
            )
    if not rows:
        return []
    return [
        Heading(3, f"Dense memory / chunked memory ({rs['source']}, {rs['hardware']})"),
        Table(
            [
                "mode",
                "our N (longest with both)",
                "our dense baseline",
                f"ours ({ours})",
                "paper N",
                f"paper ({rs['hardware']}, textbook N x N dense)",
            ],
            rows,
        ),
        Paragraph(
            "The two ratios have different numerators: the paper divides the textbook formula's memory (the "
            "N x N score matrix stored) by chunked's, ours divides the dense baseline of the cell "
            "(dense with backend 'auto': torch's fused scaled_dot_product_attention, whose fused kernels already "
            "avoid storing the scores) by chunked's. A ratio near or below 1x here says the fused baseline is "
            "already memory-efficient, not that chunking failed; a dense 'reference' series in a run measures "
            "the textbook formula."
        ),
    ]


def _dense_tflops(ok: pd.DataFrame, ours: str) -> list[Block]:
    fa = FLASH2_TFLOPS
    rows = []
    dense = ok[(ok[COL.variant] == "dense") & (ok[COL.mode] == fa["mode"])]
    for _, r in dense.sort_values([COL.series, COL.causal, COL.seq_len]).iterrows():
        table = dict(zip(fa["seq_lens"], fa["tflops"][bool(r[COL.causal])]))
        paper = table.get(int(r[COL.seq_len]))
        if paper and _measured(r[COL.tflops]):
            rows.append(
                [
                    r[COL.series],
                    "causal" if r[COL.causal] else "non-causal",
                    str(r[COL.seq_len]),
                    str(r[COL.head_dim]),
                    format_number(r[COL.tflops], ".3g"),
                    f"{paper:g}",
                ]
            )
    if not rows:
        return []
    return [
        Heading(3, f"Dense TFLOP/s, forward+backward ({fa['source']}, {fa['hardware']}, head dim {fa['head_dim']})"),
        Table(["series", "mask", "N", "our head dim", f"ours ({ours})", f"FlashAttention-2 ({fa['hardware']})"], rows),
        Paragraph(f"For scale: {fa['naive_pytorch']}."),
    ]


def _measured(value) -> bool:
    """A number we can put beside the paper's (not None, not NaN)."""
    return isinstance(value, (int, float)) and not pd.isna(value)


def _dense_backends(ok: pd.DataFrame) -> str:
    """The backends our dense baseline ran (dense rows whose config asks for 'auto'): 'dense, backend auto = sdpa'."""
    dense = ok[analysis.baseline_rows(ok).to_numpy() & analysis.auto_backend(ok)]
    ran = ", ".join(sorted({str(b) for b in dense[COL.backend].dropna()}))
    return f"dense, backend auto = {ran}" if ran else "dense"
