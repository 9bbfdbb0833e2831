"""Published numbers the report puts beside ours (harness.report.vs_published), copied from the papers.

Data only, never used as expected values: a report shows "the paper saw X on <hardware>; we see Y
on <our hardware>". Sources as cited; the numbers were transcribed from the project's ANCHORS notes.
"""

from __future__ import annotations

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
