"""The answer's exact words from a hand-made run of twelve rows whose speed-ups, intervals and errors are chosen so that
each rule decides one cell at its boundary: an interval whose low end is exactly 1 does not beat dense, intervals that
touch are a tie, an error exactly at the budget carries no note, the shorter N whose winners differ get their own line;
and the uniform-attention floor under a gaussian table quotes the median uniform error of its rows."""

from __future__ import annotations

from harness.report.findings import answer_lines
from harness.report.reach import out_of_reach
from tests.helpers.synthetic_run import analysed_rows

SPEC = 'variants = ["dense", "chunked", "sliding_window", "linformer"]\nerror_budgets = [0.05, 0.1]\n'
# N -> variant -> (speed-up, its paired interval, rel L2 error); dense is the baseline (1x, no interval)
PLAN = {
    1024: {"sliding_window": (1.3, (1.0, 1.6), 0.04), "linformer": (1.2, (0.9, 1.5), 0.1)},
    2048: {"sliding_window": (2.0, (1.8, 2.2), 0.04), "linformer": (3.0, (2.2, 3.8), 0.1)},
    4096: {"sliding_window": (4.0, (3.6, 4.4), 0.04), "linformer": (6.0, (5.0, 7.0), 0.1)},
}
CONFIGS = {
    "dense": {"backend": "auto"},
    "chunked": {"chunk_size": 256},
    "sliding_window": {"backend": "auto", "window": 256},
    "linformer": {"k": 128},
}
UNIFORM = {1024: 0.2, 2048: 0.33, 4096: 0.9}  # median over the table's rows 0.33, mean 0.48


def row(variant, n, inputs, speedup=None, interval=None, error=1e-7):
    t = 1e-9 * n * n / (speedup or 1.0)
    out = {
        "run_id": "hand",
        "cell_id": f"{variant}-{n}-{inputs}",
        "variant": variant,
        "config": dict(CONFIGS[variant]),
        "backend": "sdpa",
        "seq_len": n,
        "kv_len": n,
        "batch": 1,
        "heads": 8,
        "head_dim": 64,
        "dtype": "float32",
        "device": "cpu",
        "device_name": "Hand CPU",
        "host": "hand",
        "causal": False,
        "mode": "forward",
        "inputs": inputs,
        "seed": 0,
        "threads": 2,
        "status": "ok",
        "reason": None,
        "latency_s": t,
        "latency_p20_s": t * 0.98,
        "latency_p80_s": t * 1.02,
        "repeats": 10,
        "peak_memory_bytes": 1024 * n,
        "rel_l2_error": error,
        "cosine": 1 - error,
        "error_rows": 64,
        "load_per_cpu": 0.1,
        "uniform_rel_l2_error": UNIFORM[n],
        "schema_version": 1,
    }
    if interval:
        out.update(speedup=speedup, speedup_low=interval[0], speedup_high=interval[1])
    return out


def rows(inputs="local"):
    out = []
    for n, plan in PLAN.items():
        out += [row("dense", n, inputs), row("chunked", n, inputs, 0.9, (0.85, 0.95))]
        out += [row(v, n, inputs, s, i, e) for v, (s, i, e) in plan.items()]
    return out


def test_the_answer_lines_of_a_hand_made_run_word_for_word():
    assert answer_lines(analysed_rows(rows(), SPEC)) == [
        # N=4096: linformer's error is exactly the budget 0.1 (no note); intervals apart (no tie)
        "answer at N=4096 (local): rel_l2<=0.05: sliding_window(window=256) 4x [3.6-4.4]; "
        "rel_l2<=0.1: linformer(k=128) 6x [5-7]",
        # N=2048 names the same winners: no line. N=1024: sliding_window's interval starts at exactly 1, so it does not
        # beat dense, and touching dense's [1-1] it is a tie
        "answer at N=1024 (local): rel_l2<=0.05: dense (tie: sliding_window(window=256)); "
        "rel_l2<=0.1: dense (tie: sliding_window(window=256))",
    ]


def test_intervals_that_touch_are_a_tie_in_the_report_table():
    (table,) = analysed_rows(rows(), SPEC).tables
    # linformer [2.2-3.8] and sliding_window [1.8-2.2] share the point 2.2
    assert table.picks[(2048, 0.1)].text() == "linformer(k=128) 3x [2.2-3.8] (tie: sliding_window(window=256))"
    assert table.picks[(2048, 0.05)].text() == "sliding_window(window=256) 2x [1.8-2.2]"  # dense's [1-1] is apart


def test_a_gaussian_table_says_why_nothing_can_win_with_the_median_uniform_error():
    analysed = analysed_rows(rows("gaussian") + rows("local"), SPEC)
    texts = {t.inputs: [b.text for b in out_of_reach(analysed.frame, t)] for t in analysed.tables}
    assert texts["local"] == []  # nothing out of reach, and iid inputs are not these
    assert texts["gaussian"] == [
        "Why nothing can win on gaussian: iid q and k make the weights near-uniform, so the exact output is small "
        "(a few % of ||v||) and mostly noise; uniform attention (the mean of v) already scores 0.33 and a zero "
        "output 1, and a variant that does not compute nearly every score cannot get far below that."
    ]
