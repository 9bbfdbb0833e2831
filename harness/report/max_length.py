"""The max_length figure: per series, the longest N that ran and what stopped it (any input distribution)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.report import plotting
from harness.report.analysis import SETTING_KEYS, group_key, select, setting_title
from harness.report.render import format_n

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
    for key, group in frame.groupby(list(SETTING_KEYS) + ["series"], dropna=False, sort=True):
        oom = group[group["status"] == "oom"]["seq_len"]
        failed_at, failed_status = None, None
        for n, at_n in group.sort_values("seq_len").groupby("seq_len", sort=True):
            stops = at_n[~at_n["status"].isin(["ok", "unreachable"])]
            if not len(stops) and (at_n["status"] == "ok").any():
                continue
            failed_at, failed_status = int(n), str((stops if len(stops) else at_n)["status"].iloc[0])
            break
        ok = group[(group["status"] == "ok") & (group["seq_len"] < (failed_at or math.inf))]["seq_len"]
        records.append(
            dict(
                zip(list(SETTING_KEYS) + ["series"], group_key(key)),
                variant=group["variant"].iloc[0],
                longest_ok=int(ok.max()) if len(ok) else None,
                first_oom=int(oom.min()) if len(oom) else None,
                longest_tried=int(group["seq_len"].max()),
                failed_at=failed_at,
                failed_status=failed_status,
            )
        )
    return pd.DataFrame(records, columns=columns)


def plot_memory_limits(limits: pd.DataFrame, frame: pd.DataFrame, path: Path) -> Path | None:
    """Per setting: a bar per series to the longest N that ran, annotated with what stopped it (or none).

    None (no file) unless some cell ran out of memory or timed out: without a limit hit, every bar would read "ran every N tried".
    """
    if not frame["status"].isin(LIMIT_STATUSES).any() or not len(limits):
        return None
    # a panel where something ran ok or hit a limit (one of only unsupported cells says nothing about length)
    drawn = limits.assign(
        drawn=limits["longest_ok"].where(
            limits["longest_ok"].notna(), limits["failed_status"].where(limits["failed_status"].isin(LIMIT_STATUSES))
        )
    )
    found = plotting.with_data(drawn, "drawn")
    plt, fig, axes = plotting.grid(len(found), height=0.35 * limits["series"].nunique() + 1.2)
    styles = plotting.series_styles(frame)
    for ax, setting in zip(axes, found):
        part = select(limits, setting).sort_values("series", ascending=False)
        y = np.arange(len(part))
        left, right = max_length_axis(part)
        longest = part["longest_ok"].astype(float).fillna(0)
        ax.barh(y, longest, color=[styles[s]["color"] for s in part["series"]], height=0.6)
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
                color="black" if room else plotting_ink(styles[row["series"]]["color"]),
            )
        ax.set_yticks(y, part["series"], fontsize=8)
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


def plotting_ink(color: str) -> str:
    """White text on a dark bar, black on a light one."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"
