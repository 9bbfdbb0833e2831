"""How long a sequence each series handles: the longest N it ran and what stopped it (the max_length figure, any
input distribution), and within a memory budget (SweepSpec.memory_budget; the search that measured it:
harness.runner.longest) the longest N it trains.

Per train series (variant x recompute x precision at each other setting), the longest N whose measured peak memory
fits the budget, with the time per token there ("Longest trainable N": a table and a figure); and per setting the
cheapest combination of variant, knob, recompute and precision that trains at the largest requested N within the
budget, with its time against dense in fp32 without recompute. One rule decides what fits: harness.plan.memory_verdict.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from harness.plan import longest_within, memory_verdict, search_over
from harness.report import plotting
from harness.report.analysis import SETTING_KEYS, group_key, select, setting_title
from harness.report.render import format_bytes, format_n, format_seconds
from harness.schema import BASELINE, describe
from harness.store import COL

TRICKS = ("recompute", "precision")  # the combination's axes, beside the variant and its knob
# what a line of the answer is for: every setting but the tricks, and the inputs
OTHER_KEYS = [k for k in SETTING_KEYS if k not in TRICKS] + [COL.inputs]
COLUMNS = OTHER_KEYS + ["series", "variant", *TRICKS, "longest", "peak", "latency_s", "per_token_s", "fails", "why"]


def longest_trainable(frame: pd.DataFrame, budget: int) -> pd.DataFrame:
    """One line per train series: the longest N that fits (None: none measured does), its peak memory, seconds per
    call and per token there, and the shortest N above it that does not fit, with why."""
    records = []
    train = frame[frame[COL.mode] == "train"] if len(frame) else frame
    for key, group in train.groupby(OTHER_KEYS + [COL.series, *TRICKS], dropna=False, sort=True):
        by_n = {int(r[COL.seq_len]): r for r in group.to_dict("records")}
        found = longest_within({n: _fits(r, budget) for n, r in by_n.items()})
        at = by_n.get(found.fits) if found.fits is not None else None
        fields = dict(zip(OTHER_KEYS + [COL.series, *TRICKS], key))
        records.append(
            dict(
                fields,
                variant=group[COL.variant].iloc[0],
                longest=found.fits,
                peak=at[COL.peak_memory_bytes] if at else None,
                latency_s=at[COL.latency_s] if at else None,
                per_token_s=at[COL.latency_s] / (at[COL.batch] * found.fits) if at else None,
                fails=found.fails,
                why=found.why,
            )
        )
    return pd.DataFrame(records, columns=COLUMNS)


def table_rows(longest: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The report's table: headers and one formatted line per series."""
    varying = [k for k in OTHER_KEYS if longest[k].astype(str).nunique() > 1]
    headers = ["setting"] * bool(varying) + ["series", "recompute", "precision", "longest N", "peak memory"]
    headers += ["time per token", "first N that does not fit"]
    rows = []
    for r in longest.to_dict("records"):
        setting = [", ".join(describe(r, [k for k in varying if k != "inputs"]) + [str(r[COL.inputs])])] * bool(varying)
        if pd.notna(r["fails"]):
            fails = f"{format_n(r['fails'])} ({r['why']})"
        else:
            fails = "none measured above it" if _unfinished(r) else "none up to the search's limit"
        longest_n = format_n(r["longest"]) if pd.notna(r["longest"]) else "none"
        if _unfinished(r):
            longest_n += " (search stopped before narrowing)"
        rows.append(
            setting
            + [str(r[COL.series]), str(r[COL.recompute]), str(r[COL.precision]), longest_n, format_bytes(r["peak"])]
            + [format_seconds(r["per_token_s"]), fails]
        )
    return headers, rows


def cheapest_lines(frame: pd.DataFrame, budget: int) -> list[str]:
    """Per setting but the tricks (and inputs), at its largest N: the fastest combination whose train step fits the
    budget (within the largest error budget), and its time against dense fp32 without recompute at that N."""
    lines = []
    train = frame[(frame[COL.mode] == "train")] if len(frame) else frame
    varying = [k for k in OTHER_KEYS if len(train) and train[k].astype(str).nunique() > 1]
    for key, group in train.groupby(OTHER_KEYS, dropna=False, sort=True):
        n = int(group[COL.seq_len].max())
        at_n = group[group[COL.seq_len] == n]
        fits = [_fits(r, budget) is None for r in at_n.to_dict("records")]
        candidates = at_n[np.array(fits, dtype=bool) & at_n["in_budget"].fillna(False).astype(bool)]
        where = ", ".join([f"N={format_n(n)}"] + describe(dict(zip(OTHER_KEYS, key)), varying))
        if not len(candidates):
            lines.append(f"within {format_bytes(budget)} at {where}: no combination trains")
            continue
        best = candidates.loc[candidates[COL.latency_s].idxmin()]
        plain = at_n[(at_n[COL.series] == BASELINE) & (at_n[COL.recompute] == "none") & (at_n[COL.precision] == "fp32")]
        lines.append(
            f"within {format_bytes(budget)} at {where}: {best[COL.series]} recompute={best[COL.recompute]} "
            f"{best[COL.precision]} ({format_bytes(best[COL.peak_memory_bytes])}) {_against(best, plain, budget)}"
        )
    return lines


def _fits(row: Mapping[str, Any], budget: int) -> str | None:
    """memory_verdict of a frame row (a record or a Series): None when its train step fits the budget, else why not."""
    return memory_verdict(row[COL.status], row[COL.peak_memory_bytes], budget)


def _against(best: pd.Series, plain: pd.DataFrame, budget: int) -> str:
    """The time cost against dense fp32 without recompute, and whether that fits."""
    if not len(plain):
        return "(dense fp32 without recompute not measured here)"
    dense = plain.iloc[0]
    if dense[COL.status] != "ok":
        return f"(dense fp32 without recompute: {dense[COL.status]})"
    ratio = best[COL.latency_s] / dense[COL.latency_s]
    fits = "fits" if _fits(dense, budget) is None else "does not fit"
    return f"at {ratio:.2f}x the time of dense fp32 without recompute ({fits}: {format_bytes(dense[COL.peak_memory_bytes])})"


def plot_longest(longest: pd.DataFrame, budget: int, path: Path) -> Path | None:
    """A bar per series to its longest N within the budget (log2 axis), one panel per setting, labelled with the time
    per token there; a colour per recompute, hatched under autocast. None when no series fits at any N."""
    if not len(longest) or longest["longest"].isna().all():
        return None
    groups = list(longest.groupby(OTHER_KEYS, dropna=False, sort=True))
    height = 0.32 * max(len(g) for _, g in groups) + 1.3
    plt, fig, axes = plotting.grid(len(groups), ncols=1, width=7.5, height=height)
    colors = {"none": "#4c72b0", "attention": "#dd8452", "layer": "#55a868"}
    found = longest["longest"].dropna().astype(float)
    left, right = max(1.0, float(found.min()) / 2), float(found.max()) * 4  # the same N axis in every panel
    for ax, (key, part) in zip(axes, groups):
        part = part.sort_values([COL.series, COL.recompute, COL.precision], ascending=False)
        y = np.arange(len(part))
        n = part["longest"].astype(float).fillna(0)
        hatches = ["//" if p != "fp32" else "" for p in part[COL.precision]]
        ax.barh(y, n, height=0.7, color=[colors.get(r, "grey") for r in part[COL.recompute]], hatch=hatches)
        for yi, r in zip(y, part.to_dict("records")):
            text = (
                f"none fits ({r['why']} at {format_n(r['fails'])})"
                if pd.isna(r["longest"])
                else f"{format_n(r['longest'])}{_stopped_label(r)}, {format_seconds(r['per_token_s'])}/token"
            )
            at = float(r["longest"]) if pd.notna(r["longest"]) else left
            ax.text(at * 1.08, yi, text, va="center", fontsize=7)
        ax.set_yticks(
            y, [f"{s}  {r}  {p}" for s, r, p in zip(part[COL.series], part[COL.recompute], part[COL.precision])]
        )
        ax.tick_params(axis="y", labelsize=7)
        ax.set_xscale("log", base=2)
        ax.set_xlim(left=left, right=right)
        ax.xaxis.set_major_formatter(plotting.n_formatter())
        ax.set_xlabel(f"longest N whose train step fits {format_bytes(budget)}")
        setting = dict(zip(OTHER_KEYS, key))
        ax.set_title(
            setting_title({**setting, "recompute": None, "precision": None}) + f", {setting['inputs']}", fontsize=9
        )
        ax.grid(True, axis="x", alpha=0.3)
    used = [r for r in colors if r in set(longest[COL.recompute])]
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[r]) for r in used]
    labels = [f"recompute {r}" for r in used]
    if (longest[COL.precision] != "fp32").any():
        handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor="black", hatch="//"))
        labels.append("autocast (hatched)")
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize=8)
    fig.suptitle(f"Longest trainable N within {format_bytes(budget)} of peak memory", fontsize=11)
    plotting.save(plt, fig, path)
    return path


def _unfinished(r: dict) -> bool:
    """Whether the search stopped (a time limit, Ctrl-C) before its answer for this series: while doubling (nothing
    measured above the longest N that fits, below the search's limit) or before the bisection narrowed the bracket."""
    if pd.isna(r["longest"]):
        return False
    return not search_over(int(r["longest"]), None if pd.isna(r["fails"]) else int(r["fails"]))


def _stopped_label(r: dict) -> str:
    """The figure's note on a stopped search: where the answer lies."""
    if not _unfinished(r):
        return ""
    return " or more (search stopped)" if pd.isna(r["fails"]) else f"-{format_n(r['fails'])} (search stopped)"


# ---- the longest N each series ran (any input distribution) ------------------------------------------
LIMIT_STATUSES = ("oom", "timeout")  # the failures that make a length limit worth a figure


def memory_limits(frame: pd.DataFrame) -> pd.DataFrame:
    """Per setting and series: the longest N that ran ok below its first failure, the shortest N that ran out of
    memory, the longest N tried, and the first failure (its N and status: oom, error, timeout...).

    A failure on any input distribution stops a series there (a timeout at 8K on one is a limit, though another ran
    8K ok), except `unreachable`, a budget missed on one distribution: it stops a series only where every row missed.
    """
    columns = list(SETTING_KEYS) + [
        "series",
        "variant",
        "longest_ok",
        "first_oom",
        "longest_tried",
        "failed_at",
        "failed_status",
    ]
    records = []
    for key, group in frame.groupby(list(SETTING_KEYS) + [COL.series], dropna=False, sort=True):
        oom = group[group[COL.status] == "oom"][COL.seq_len]
        failed_at, failed_status = None, None
        for n, at_n in group.sort_values(COL.seq_len).groupby(COL.seq_len, sort=True):
            stops = at_n[~at_n[COL.status].isin(["ok", "unreachable"])]
            if not len(stops) and (at_n[COL.status] == "ok").any():
                continue
            failed_at, failed_status = int(n), str((stops if len(stops) else at_n)[COL.status].iloc[0])
            break
        ok = group[(group[COL.status] == "ok") & (group[COL.seq_len] < (failed_at or math.inf))][COL.seq_len]
        records.append(
            dict(
                zip(list(SETTING_KEYS) + [COL.series], group_key(key)),
                variant=group[COL.variant].iloc[0],
                longest_ok=int(ok.max()) if len(ok) else None,
                first_oom=int(oom.min()) if len(oom) else None,
                longest_tried=int(group[COL.seq_len].max()),
                failed_at=failed_at,
                failed_status=failed_status,
            )
        )
    return pd.DataFrame(records, columns=columns)


def plot_memory_limits(limits: pd.DataFrame, frame: pd.DataFrame, path: Path) -> Path | None:
    """Per setting: a bar per series to the longest N that ran, annotated with what stopped it (or none).

    None (no file) unless some cell ran out of memory or timed out: without a limit hit, every bar would read "ran every N tried".
    """
    if not frame[COL.status].isin(LIMIT_STATUSES).any() or not len(limits):
        return None
    # a panel where something ran ok or hit a limit (one of only unsupported cells says nothing about length)
    drawn = limits.assign(
        drawn=limits["longest_ok"].where(
            limits["longest_ok"].notna(), limits["failed_status"].where(limits["failed_status"].isin(LIMIT_STATUSES))
        )
    )
    found = plotting.with_data(drawn, "drawn")
    plt, fig, axes = plotting.grid(len(found), height=0.35 * limits[COL.series].nunique() + 1.2)
    styles = plotting.series_styles(frame)
    for ax, setting in zip(axes, found):
        part = select(limits, setting).sort_values(COL.series, ascending=False)
        y = np.arange(len(part))
        left, right = max_length_axis(part)
        longest = part["longest_ok"].astype(float).fillna(0)
        ax.barh(y, longest, color=[styles[s]["color"] for s in part[COL.series]], height=0.6)
        for yi, (_, row) in zip(y, part.iterrows()):
            end = max(float(row["longest_ok"]) if pd.notna(row["longest_ok"]) else 0.0, left)
            room = np.log2(right / end) >= 2.5  # octaves right of the bar: enough for the text beside it
            ax.text(
                end * (1.1 if room else 0.9),
                yi,
                max_length_text(row),
                va="center",
                ha="left" if room else "right",
                fontsize=7,
                color="black" if room else plotting.ink(styles[row[COL.series]]["color"]),
            )
        ax.set_yticks(y, part[COL.series], fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xlim(left=left, right=right)
        ax.axvline(float(part["longest_tried"].max()), color="gray", linestyle=":", linewidth=1)
        ax.xaxis.set_major_formatter(plotting.n_formatter())
        ax.set_xlabel("longest N that ran ok (dotted: the longest N tried)")
        ax.set_title(setting_title(setting), fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    for ax in axes[len(found) :]:
        ax.set_visible(False)
    fig.suptitle("Longest sequence each variant ran, and what stopped it (any input distribution)", fontsize=11)
    plotting.save(plt, fig, path)
    return path


def max_length_axis(part: pd.DataFrame) -> tuple[float, float]:
    """The x range of one panel: from half its shortest bar or failure to 1.5x the longest N tried (room for the
    text), never beyond: a run that stopped at 8K is not drawn to 32K."""
    ends = pd.concat([part["longest_ok"], part["failed_at"], part["longest_tried"]]).dropna().astype(float)
    ends = ends[ends > 0]
    return (float(ends.min()) / 2, float(part["longest_tried"].max()) * 1.5) if len(ends) else (1.0, 2.0)


def max_length_text(row: pd.Series) -> str:
    """What stopped a series: 'timeout at 8K', 'never ran ok (unreachable at 256)', 'ran every N tried (to 4K)'."""
    status = {"oom": "OOM"}.get(row["failed_status"], row["failed_status"])
    if pd.isna(row["longest_ok"]):
        return (
            f"never ran ok ({status} at {format_n(row['failed_at'])})" if pd.notna(row["failed_at"]) else "never ran ok"
        )
    if pd.notna(row["failed_at"]):
        return f"{status} at {format_n(row['failed_at'])}"
    return f"ran every N tried (to {format_n(row['longest_tried'])})"
