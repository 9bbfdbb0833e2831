"""What a sweep prints at the end: variant x N per setting (latency, speed-up, memory ratio, error, and for a
series matched to an error budget the knob value found at each N), and the answer."""
from __future__ import annotations

import warnings
from pathlib import Path

from harness.report.analysis import SETTING_KEYS, axes_title, with_dense_ratios
from harness.report.formatting import format_error, format_n, format_ratio, format_seconds_compact
from harness.store import rows_frame


def summary_table(rows: list[dict]) -> str:
    """Variant x N per setting: latency, speed-up and memory ratio vs dense, relative error (status when not ok)."""
    if not rows:
        return "(no rows)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = rows_frame(rows)
    frame = with_dense_ratios(frame)
    keys = list(SETTING_KEYS) + ["inputs"]
    blocks = []
    for setting, group in frame.groupby(keys, sort=False):
        s = dict(zip(keys, setting))
        title = (f"{s['mode']} {s['dtype']} {'causal' if s['causal'] else 'non-causal'} B={s['batch']} H={s['heads']} "
                 f"D={s['head_dim']}{axes_title(s)} inputs={s['inputs']} on {s['device']}")
        lengths = sorted(group["seq_len"].unique())
        header = ["variant", "metric"] + [format_n(n) for n in lengths]
        lines = [header]
        for series, part in group.groupby("series", sort=False):
            by_n = {int(r["seq_len"]): r for _, r in part.iterrows()}
            knob = next((r["tuning"]["knob"] for r in by_n.values() if isinstance(r["tuning"], dict)), None)
            metrics = _METRICS + ((knob, lambda r, knob=knob: str(r["config"].get(knob, "-"))),) if knob else _METRICS
            for i, (metric, fmt) in enumerate(metrics):
                cells = []
                for n in lengths:
                    r = by_n.get(int(n))
                    if r is None:
                        cells.append("")
                    elif r["status"] != "ok":
                        cells.append(str(r["status"]) if i == 0 else "")
                    else:
                        cells.append(fmt(r))
                lines.append([series if i == 0 else "", metric] + cells)
        widths = [max(len(line[c]) for line in lines) for c in range(len(header))]
        text = "\n".join("  ".join(cell.ljust(w) if c < 2 else cell.rjust(w) for c, (cell, w) in enumerate(zip(line, widths))).rstrip() for line in lines)
        blocks.append(f"{title}\n{text}")
    return "\n\n".join(blocks)


_METRICS = (
    ("latency", lambda r: format_seconds_compact(r["latency_s"])),
    ("speed-up", lambda r: format_ratio(r["speedup"])),
    ("memory", lambda r: format_ratio(r["memory_ratio"])),
    ("rel err", lambda r: format_error(r["rel_l2_error"])),
)


def answer_lines(run_dir: Path) -> list[str]:
    """The report's answer at the largest N, one line per setting and input distribution (harness.report.choice)."""
    from harness.report import choice
    from harness.store import load_run

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the report and the table have said what was skipped
        run = load_run(run_dir)
    if not len(run.rows):
        return []
    return choice.answer_lines(choice.answer_tables(choice.answer_frame(run.rows, run.spec_text)))
