"""The studies' figures: model-eval's cosine and retrieval bars, tasks' accuracy bars (pyplot from harness.report.plotting)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.report.plotting import pyplot, save
from harness.report.study_results import series_label
from harness.studies.budget_search import label
from harness.report.study_outcomes import succeeded

DPI = 120


def plot_model_eval(rows: list[dict[str, Any]], path: Path, *, model: str) -> Path:
    """Two panels per length limit: 1 - mean cosine (log) and retrieval agreement, one bar per variant."""
    plt = pyplot()
    variants = list(dict.fromkeys(label(r) for r in rows))  # a variant matched to budgets: one per budget
    lens = sorted({r["max_len"] for r in rows})
    width = 0.8 / max(len(lens), 1)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for j, max_len in enumerate(lens):
        by = {label(r): r for r in rows if r["max_len"] == max_len and succeeded(r)}
        xs = [i + j * width for i in range(len(variants))]
        ax1.bar(
            xs,
            [max(1 - by[v]["cosine_mean"], 1e-8) if v in by else float("nan") for v in variants],
            width,
            label=f"max_len {max_len}",
        )
        ax2.bar(
            xs,
            [by[v]["retrieval_agreement"] if v in by else float("nan") for v in variants],
            width,
            label=f"max_len {max_len}",
        )
    for ax in (ax1, ax2):
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(variants))], variants, rotation=20)
    ax1.set_yscale("log")
    ax1.set_ylabel("1 - cosine to the original\n(lower is better; floor 1e-8)")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("nearest neighbour unchanged")
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(f"{model}: every attention layer swapped")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save(plt, fig, path, dpi=DPI)
    return path


def plot_lm_eval(rows: list[dict[str, Any]], path: Path, *, model: str) -> Path:
    """Two panels against N: KL(dense || variant) (log) and next-token top-1 agreement, one line per variant."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for variant in dict.fromkeys(label(r) for r in rows):  # a variant matched to budgets: one line per budget
        ok = sorted(((r["seq_len"], r) for r in rows if label(r) == variant and succeeded(r)), key=lambda p: p[0])
        if not ok:
            continue
        lens = [n for n, _ in ok]
        ax1.plot(lens, [max(r["kl_mean"], 1e-10) for _, r in ok], marker="o", label=variant)
        ax2.plot(lens, [r["top1_agreement"] for _, r in ok], marker="o", label=variant)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N")
    ax1.set_yscale("log")
    ax1.set_ylabel("KL(dense || variant) per token\n(lower is better; floor 1e-10)")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("next-token top-1 agreement")
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(len(labels), 1), fontsize=8, frameon=False)
    fig.suptitle(f"{model}: attention layers swapped")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    save(plt, fig, path, dpi=DPI)
    return path


def plot_tasks(rows: list[dict[str, Any]], path: Path) -> Path:
    """Grouped bars: accuracy per variant for each task and N, with each task's chance level."""
    plt = pyplot()
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        lens = sorted({r["seq_len"] for r in rows if r["task"] == task})
        width = 0.8 / max(len(variants), 1)
        for j, variant in enumerate(variants):
            acc = []
            for n in lens:
                r = next((r for r in rows if (r["task"], r["variant"], r["seq_len"]) == (task, variant, n)), None)
                acc.append(r["accuracy"] if r and r["accuracy"] is not None else float("nan"))
            ax.bar([i + j * width for i in range(len(lens))], acc, width, label=series_label(rows, variant))
        chance = next(r["chance"] for r in rows if r["task"] == task)
        ax.axhline(chance, color="grey", linestyle="--", linewidth=1, label="chance")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(lens))], [f"N={n}" for n in lens])
        ax.set_ylim(0, 1)
        ax.set_title(task)
        ax.set_ylabel("test accuracy")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    save(plt, fig, path, dpi=DPI)
    return path
