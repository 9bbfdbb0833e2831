"""`python -m harness report RUN_DIR`: report.md, a self-contained report.html and PNG figures from a run folder.

Also called by the sweep at its end through ``write_report(run_dir)``. Everything shown is
computed from rows.jsonl (see harness.analysis); failed cells are shown with their reason,
never dropped. The page is built once as a list of blocks and rendered twice (Markdown, HTML).
"""
from __future__ import annotations

import argparse
import base64
import html
import re
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from harness import analysis, anchors
from harness.plots import FIGURE_FILES, format_bytes, format_seconds

MAPS_INPUTS_PREFERENCE = ("local", "global", "lowrank", "gaussian")  # structured inputs make the maps readable
REASON_WIDTH = 90  # characters of a failure reason shown in a table cell

# A page is a list of blocks: ("h", level, text) | ("p", text) | ("table", headers, rows) |
# ("img", file name, caption) | ("code", text)
Block = tuple


def write_report(
    run_dir: str | Path,
    *,
    maps: bool = True,
    maps_n: int = 64,
    maps_inputs: str | None = None,
    maps_calibrate: bool = True,
    budgets: Sequence[float] = analysis.DEFAULT_BUDGETS,
) -> list[Path]:
    """Write report.md, report.html and the figures (PNG) into the run folder; return the paths written.

    Args:
        run_dir: the run folder (rows.jsonl, env.json, spec.toml).
        maps: draw the effective attention maps (runs each variant once on CPU at N = maps_n).
        maps_n: N = M = D of the maps.
        maps_inputs: input distribution of the maps (default: the first of local, global, lowrank,
            gaussian that the run measured).
        maps_calibrate: fit learnable variants at maps_n before drawing (a few seconds each); False draws
            them as built, which shows an untrained starting point rather than what the sweep measured.
        budgets: relative L2 error budgets of the recommendation.
    Raises:
        harness.cli.UsageError: run_dir is not a run folder.
    """
    from harness.rows import load_run

    run = load_run(run_dir)
    frame = analysis.with_dense_ratios(run.rows)
    blocks: list[Block] = [("h", 1, f"attnsuite report: {run.name}")]
    blocks += [("p", f"Note: {n}") for n in run.notes]
    blocks += _environment(run.env, frame)
    blocks += _devices(frame)
    if run.spec_text:
        blocks += [("h", 2, "Spec"), ("code", run.spec_text.strip())]
    written: list[Path] = []
    ok = frame[frame["status"] == "ok"] if len(frame) else frame
    if not len(frame):
        blocks += [("h", 2, "Outcome"), ("p", "**This run has no rows**: no cell finished (the run may have been killed "
                                           "before the first cell, or every line was unreadable). Nothing to report.")]
    else:
        blocks += _outcome(frame)
        if not len(ok):
            blocks.append(("p", "**No cell ran successfully** in this run, so there are no figures, fits or "
                                "recommendations; the tables below give each cell's status and reason."))
        else:
            blocks += _recommendation(frame, budgets)
            blocks += [("p", caveat) for caveat in accuracy_caveats(run.path)]
            blocks += _scaling(frame)
            figures, figure_blocks = _figures(frame, run.path)
            written += figures
            blocks += figure_blocks
            if maps:
                figures, map_blocks = _maps(frame, run.path, n=maps_n, inputs=maps_inputs, calibrate=maps_calibrate)
                written += figures
                blocks += map_blocks
            blocks += _anchors(frame, run.env)
        blocks += _tables(frame)
    blocks += _accuracy_sections(run.path)
    md_path, html_path = run.path / "report.md", run.path / "report.html"
    md_path.write_text(render_markdown(blocks), encoding="utf-8")
    html_path.write_text(render_html(blocks, run.path, title=f"attnsuite report: {run.name}"), encoding="utf-8")
    return [md_path, html_path] + written


# ---- sections -------------------------------------------------------------------------------------
def _environment(env: dict[str, Any], frame: pd.DataFrame) -> list[Block]:
    device = env.get("gpu") or env.get("cpu") or "unknown"
    column = lambda name: ", ".join(sorted({str(v) for v in frame[name] if v is not None})) if len(frame) else "-"  # noqa: E731
    rows = [
        ["device", f"{device}" + (f" (run rows: {column('device_name')})" if len(frame) else "")],
        ["torch", _text(env.get("torch"))],
        ["CUDA", _text(env.get("cuda"))],
        ["dtypes", column("dtype")],
        ["threads", f"torch {_text(env.get('torch_threads'))} of {_text(env.get('cpu_count'))} CPUs"],
        ["commit", _text(env.get("git_commit"))],
        ["python", _text(env.get("python"))],
        ["host", _text(env.get("host"))],
    ]
    packages = env.get("packages") or {}
    if packages:
        rows.append(["packages", ", ".join(f"{k} {v}" for k, v in sorted(packages.items()) if v)])
    if not env:
        rows.append(["note", "env.json missing or unreadable"])
    return [("h", 2, "Environment"), ("table", ["", ""], rows)]


def _devices(frame: pd.DataFrame) -> list[Block]:
    """Only when the run spans several devices (a Ray or Slurm sweep over mixed GPUs): cells per device and host."""
    if not len(frame) or frame["device_name"].nunique() < 2:
        return []
    rows = [[str(name), ", ".join(sorted({str(h) for h in part["host"]})), str(len(part)), str(int((part["status"] == "ok").sum()))]
            for name, part in frame.groupby("device_name", sort=True)]
    note = ("This run's cells ran on different devices (see each table's device column). Latency, speed-up and memory "
            "ratios compare cells measured on different hardware; for a clean comparison run each device type as its own "
            "run (docs/scaling.md).")
    return [("h", 2, "Devices"), ("p", note), ("table", ["device", "hosts", "cells", "ok"], rows)]


def _outcome(frame: pd.DataFrame) -> list[Block]:
    counts = frame.groupby(["series", "status"]).size().unstack(fill_value=0)
    statuses = [s for s in ("ok", "oom", "unsupported", "error", "nonfinite", "timeout") if s in counts.columns]
    statuses += [s for s in counts.columns if s not in statuses]
    rows = [[series] + [str(int(counts.at[series, s])) for s in statuses] for series in counts.index]
    total = f"{len(frame)} cells: " + ", ".join(f"{int(counts[s].sum())} {s}" for s in statuses)
    return [("h", 2, "Outcome"), ("p", total), ("table", ["series"] + statuses, rows)]


def _recommendation(frame: pd.DataFrame, budgets: Sequence[float]) -> list[Block]:
    text = analysis.recommend(frame, budgets)
    intro = ("The fastest series whose relative L2 error (worst over the input distributions measured) stays "
             "within each budget, per range of N; computed from the rows below. Approximate variants that "
             "win here may still be wrong for your inputs: check the error table for your distribution.")
    blocks: list[Block] = [("h", 2, "Which one should I use"), ("p", intro)] + [("p", t) for t in text]
    distributions = sorted({str(v) for v in frame["inputs"]})
    if len(distributions) > 1:  # the worst case hides what suits inputs like one of them: say that too
        blocks.append(("p", "If your attention looks like one of the input distributions measured, the answer for it alone:"))
        for dist in distributions:
            blocks += [("p", f"Inputs {dist}: {t}") for t in analysis.recommend(frame[frame["inputs"] == dist], budgets)]
    return blocks


def _scaling(frame: pd.DataFrame) -> list[Block]:
    exps = analysis.scaling_exponents(frame)
    cross = analysis.crossovers(frame)
    blocks: list[Block] = [("h", 2, "Scaling"), ("p", (
        f"Log-log slope of latency and of peak memory in N over the three longest lengths that ran "
        f"(inputs: {analysis.primary_inputs(frame)}): dense attention should be near 2, linear-cost variants near 1. "
        "Crossover: the N from which a variant is faster than dense at every longer measured N "
        "(interpolated in log-log between the two bracketing lengths)."))]
    merged = exps.merge(cross, on=list(analysis.SETTING_KEYS) + ["series"], how="left")
    rows = []
    for _, r in merged.iterrows():
        rows.append([
            analysis.setting_title(r.to_dict()), r["series"], _num(r["time_exponent"], ".2f"), _num(r["memory_exponent"], ".2f"),
            f"{r['fit_from']}-{r['fit_to']}" if r["points"] and r["points"] > 1 else "too few points",
            _crossover_text(r),
        ])
    blocks.append(("table", ["setting", "series", "time exponent", "memory exponent", "fit over N", "faster than dense"], rows))
    return blocks


def _crossover_text(r: pd.Series) -> str:
    if r["series"] == analysis.BASELINE or str(r["series"]).startswith(analysis.BASELINE + "("):
        return "(baseline)"
    kind = r.get("kind")
    text = {
        "always": "at every N measured",
        "never": "not at the longest N measured",
        "no data": "no N with both timed",
        "crosses": f"from N ~ {r['length']:.0f}" if pd.notna(r.get("length")) else "",
    }.get(kind, "-")
    if pd.notna(r.get("dense_oom_from")):
        text += f"; dense out of memory from N={int(r['dense_oom_from'])}"
    return text


def _figures(frame: pd.DataFrame, folder: Path) -> tuple[list[Path], list[Block]]:
    from harness import plots

    made = [
        (plots.plot_metric_vs_n(frame, "latency_s", folder / FIGURE_FILES["latency"], ylabel="time per call (median)", title="Latency vs N",
                                seconds_axis=True),
         "Latency (median of the repeats) against N, log-log. Crosses: out of memory."),
        (plots.plot_metric_vs_n(frame, "peak_memory_bytes", folder / FIGURE_FILES["memory"], ylabel="peak memory beyond the inputs",
                                title="Peak memory vs N", bytes_axis=True),
         "Peak memory beyond the inputs against N, log-log. Crosses: out of memory."),
        (plots.plot_metric_vs_n(frame, "speedup", folder / FIGURE_FILES["speedup"], ylabel="speed-up over dense (x)",
                                title="Speed-up over dense vs N", hline=1.0, ratio_axis=True),
         "Dense latency divided by the variant's at the same cell; above the dashed line is faster than dense. "
         "The dense baseline is the dense row whose config asks for backend 'auto', else the fastest dense row."),
        (plots.plot_error_vs_n(frame, folder / FIGURE_FILES["error"]),
         "Relative L2 error of the output against exact float64 attention, per input distribution."),
        (plots.plot_pareto(frame, folder / FIGURE_FILES["pareto"]),
         "Worst error over the input distributions against latency, at the longest N every series ran."),
        (plots.plot_memory_limits(analysis.memory_limits(frame), frame, folder / FIGURE_FILES["limits"]),
         "The longest N each series ran, and the first N where it ran out of memory."),
    ]
    paths = [p for p, _ in made if p is not None]
    blocks: list[Block] = [("h", 2, "Figures")]
    blocks += [("img", p.name, caption) for p, caption in made if p is not None]
    return paths, blocks


def _maps(frame: pd.DataFrame, folder: Path, *, n: int, inputs: str | None, calibrate: bool) -> tuple[list[Path], list[Block]]:
    from harness import plots
    from harness._named import parse_entry
    from harness.attention_maps import attention_maps

    measured = sorted({str(v) for v in frame["inputs"]})
    if inputs is None:
        names = {parse_entry(m)[0]: m for m in measured}  # the name only: a plugin's distribution may not be registered here
        inputs = next((names[p] for p in MAPS_INPUTS_PREFERENCE if p in names), measured[0] if measured else "gaussian")
    causal = bool(len(frame)) and not (~frame["causal"].astype(bool)).any()
    series = []
    for label, group in frame.groupby("series", sort=True):
        series.append((label, str(group["variant"].iloc[0]), group["config"].iloc[0]))
    try:
        maps = attention_maps(series, n=n, inputs=inputs, causal=causal, calibrate=calibrate)
    except ValueError as exc:  # e.g. a plugin input distribution not registered here: draw on gaussian inputs
        maps = attention_maps(series, n=n, inputs="gaussian", causal=causal, calibrate=calibrate)
        inputs = f"gaussian (could not make {inputs!r}: {exc})"
    path = plots.plot_attention_maps(maps, folder / FIGURE_FILES["maps"], colors=plots.variant_colors(list(frame["variant"])))
    how = ("Learnable variants are fitted at this N with the calibration defaults (other seeds of the same distribution)."
           if calibrate else
           "Learnable variants are drawn as built (seeded, uncalibrated): the run does not store fitted states, so their "
           "maps show the untrained starting point, not what the sweep measured after calibration.")
    caption = (f"What each variant actually applies, found by feeding v = identity at N = M = D = {n} on '{maps.inputs}' inputs "
               f"(CPU, float32). {how} Each panel's 'weights rel. error' compares its matrix with the exact one.")
    rows = [[p.label, _num(p.rel_error, ".3g") if p.weights is not None else "-", p.note or ""] for p in maps.panels]
    blocks: list[Block] = [("h", 2, "Effective attention maps"), ("img", path.name, caption),
                           ("table", ["series", "weights rel. error", "note"], rows)]
    return [path], blocks


# `python -m harness model-eval --run RUN_DIR` and `tasks --run RUN_DIR` leave <stem>.json/.md/.png in the run folder.
ACCURACY_RESULTS = (
    ("model_eval", "Inside a pretrained model (model-eval)",
     "Each variant swapped into every attention layer of all-MiniLM-L6-v2 (its weights kept): sentence-embedding cosine "
     "to the unmodified model and how often each passage's nearest neighbour stays the same."),
    ("tasks", "Trained from scratch on long-range tasks (tasks)",
     "Tiny transformers of one size, one per variant, trained with the same budget on MQAR (associative recall) and "
     "ListOps; test accuracy, and in brackets the change against dense."),
)
TASK_LOSS_FLAG = 0.05  # accuracy points below dense that the recommendation calls out
MODEL_COSINE_FLAG = 0.99  # mean embedding cosine below which the recommendation calls a variant out


def _accuracy_sections(folder: Path) -> list[Block]:
    """The model-eval and tasks results found in the run folder, as tables and figures."""
    blocks: list[Block] = []
    for stem, title, what in ACCURACY_RESULTS:
        md_path = folder / f"{stem}.md"
        if not md_path.is_file():
            continue
        blocks += [("h", 2, title), ("p", what)]
        blocks += [("table", headers, rows) for headers, rows in _markdown_tables(md_path.read_text(encoding="utf-8"))]
        if (folder / f"{stem}.png").is_file():
            blocks.append(("img", f"{stem}.png", what))
    return blocks


def accuracy_caveats(folder: Path) -> list[str]:
    """Sentences for the recommendation from model-eval and tasks results in the run folder (if any)."""
    import json

    out = []
    rows = _result_rows(folder / "tasks.json", json)
    losses: dict[str, list[str]] = {}
    for r in rows:
        delta = r.get("delta_to_dense")
        if r.get("status") == "ok" and delta is not None and delta < -TASK_LOSS_FLAG:
            losses.setdefault(_labelled(r), []).append(f"{r['task']} N={r['seq_len']}: {delta:+.2f}")
    if losses:
        parts = "; ".join(f"{v} ({', '.join(items)})" for v, items in sorted(losses.items()))
        out.append(f"**Trained tasks:** these lose more than {TASK_LOSS_FLAG:.0%} accuracy against dense: {parts}. "
                   "A small error on random inputs does not guarantee a model trains as well.")
    rows = _result_rows(folder / "model_eval.json", json)
    weak = sorted({f"{_labelled(r)} (cosine {r['cosine_mean']:.3f} at {r['max_len']} tokens)" for r in rows
                   if r.get("status") == "ok" and r.get("cosine_mean") is not None and r["cosine_mean"] < MODEL_COSINE_FLAG})
    if weak:
        out.append(f"**Inside a pretrained model:** swapped in without retraining, these move sentence embeddings "
                   f"below cosine {MODEL_COSINE_FLAG}: {', '.join(weak)}.")
    return out


def _labelled(row: dict) -> str:
    """'sliding_window(window=16)': the variant with the config fields that differ from its defaults."""
    from variants import build_config

    config = row.get("config") or {}
    try:
        defaults = build_config(row["variant"]).to_dict()
    except (TypeError, ValueError):  # a variant not registered here: show it as recorded
        defaults = {}
    changed = [f"{k}={v}" for k, v in config.items() if k in defaults and defaults[k] != v]
    return row["variant"] + (f"({','.join(changed)})" if changed else "")


def _result_rows(path: Path, json: Any) -> list[dict]:
    try:
        return list(json.loads(path.read_text(encoding="utf-8")).get("rows", []))
    except (OSError, ValueError, AttributeError):
        return []


def _markdown_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """The pipe tables of a Markdown text (as written by harness.accuracy_io.markdown_table)."""
    tables, lines = [], [line.strip() for line in text.splitlines()]
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and set(lines[i + 1]) <= set("|-: "):
            headers = [c.strip() for c in lines[i].strip("|").split("|")]
            i += 2
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip("|").split("|")])
                i += 1
            tables.append((headers, rows))
        else:
            i += 1
    return tables


def _anchors(frame: pd.DataFrame, env: dict) -> list[Block]:
    ours = env.get("gpu") or env.get("cpu") or "this machine"
    ok = frame[(frame["status"] == "ok") & (frame["inputs"] == analysis.primary_inputs(frame))]
    blocks: list[Block] = [("h", 2, "Published numbers beside ours"), ("p", (
        f"Ours: {ours}. The papers measured other hardware, sizes and software; these put orders of magnitude "
        "side by side, they are not pass/fail checks."))]
    found = False
    lin = anchors.LINFORMER_SPEEDUP
    rows = []
    for _, r in ok[(ok["variant"] == "linformer") & (ok["mode"] == "forward")].sort_values(["series", "seq_len"]).iterrows():
        k = r["config"].get("k") if isinstance(r["config"], dict) else None
        paper = lin["speedup"].get((int(r["seq_len"]), k))
        rows.append([r["series"], str(r["seq_len"]), str(k), _num(r["speedup"], ".2f", "x"), f"{paper:g}x" if paper else "-"])
    if rows:
        found = True
        blocks += [("h", 3, f"Linformer speed-up over dense, forward ({lin['source']}, {lin['hardware']})"),
                   ("table", ["series", "N", "k", f"ours ({ours})", f"paper ({lin['hardware']})"], rows)]
    rs = anchors.RABE_STAATS_MEMORY
    rows = []
    for mode in ("forward", "train"):
        part = ok[(ok["variant"] == "chunked") & (ok["mode"] == mode) & ok["memory_ratio"].notna()]
        if len(part):
            best = part.sort_values("seq_len").iloc[-1]
            rows.append([mode, str(best["seq_len"]), _num(1 / best["memory_ratio"], ".3g", "x"), f"{rs['seq_len']}", f"{rs['ratio'][mode]:g}x"])
    if rows:
        found = True
        blocks += [("h", 3, f"Dense memory / chunked memory ({rs['source']}, {rs['hardware']})"),
                   ("table", ["mode", "our N (longest with both)", f"ours ({ours})", "paper N", f"paper ({rs['hardware']})"], rows)]
    fa = anchors.FLASH2_TFLOPS
    rows = []
    dense = ok[(ok["variant"] == "dense") & (ok["mode"] == fa["mode"])]
    for _, r in dense.sort_values(["series", "causal", "seq_len"]).iterrows():
        table = dict(zip(fa["seq_lens"], fa["tflops"][bool(r["causal"])]))
        paper = table.get(int(r["seq_len"]))
        rows.append([r["series"], "causal" if r["causal"] else "non-causal", str(r["seq_len"]), str(r["head_dim"]),
                     _num(r["tflops"], ".3g"), f"{paper:g}" if paper else "-"])
    if rows:
        found = True
        blocks += [("h", 3, f"Dense TFLOP/s, forward+backward ({fa['source']}, {fa['hardware']}, head dim {fa['head_dim']})"),
                   ("table", ["series", "mask", "N", "our head dim", f"ours ({ours})", f"FlashAttention-2 ({fa['hardware']})"], rows),
                   ("p", f"For scale: {fa['naive_pytorch']}.")]
    if not found:
        blocks.append(("p", "No cell of this run matches a published comparison (linformer forward, chunked memory, dense train TFLOP/s)."))
    return blocks


def _tables(frame: pd.DataFrame) -> list[Block]:
    blocks: list[Block] = [("h", 2, "Tables"), ("p", (
        "Every cell of the run, per setting and input distribution. Speed-up and memory ratio are against the dense "
        "baseline of the same cell; a failed cell shows its status and reason."))]
    mixed = frame["device_name"].nunique() > 1  # several devices: name each cell's
    for setting in analysis.settings(frame):
        part = analysis.select(frame, setting)
        for dist in sorted({str(v) for v in part["inputs"]}):
            sub = part[part["inputs"] == dist].sort_values(["series", "seq_len"])
            rows = [_table_row(r) + ([str(r["device_name"])] if mixed else []) for _, r in sub.iterrows()]
            blocks += [("h", 3, f"{analysis.setting_title(setting)}, inputs {dist}"),
                       ("table", ["series", "N", "status", "latency", "speed-up", "peak memory", "vs dense", "TFLOP/s", "rel. error", "reason"]
                        + (["device"] if mixed else []), rows)]
    return blocks


def _table_row(r: pd.Series) -> list[str]:
    ok = r["status"] == "ok"
    speed = _num(r["speedup"], ".2f", "x") if ok else "-"
    if ok and not np.isfinite(r["speedup"]) and r.get("dense_status"):
        speed = f"(dense {r['dense_status']})"
    return [
        str(r["series"]), str(r["seq_len"]), str(r["status"]).upper() if r["status"] == "oom" else str(r["status"]),
        format_seconds(r["latency_s"]) if ok else "-", speed,
        format_bytes(r["peak_memory_bytes"]) if ok else "-", _num(r["memory_ratio"], ".2f", "x") if ok else "-",
        _num(r["tflops"], ".3g") if ok else "-", _num(r["rel_l2_error"], ".2e") if ok else "-",
        _short(r["reason"]) if not ok else "",
    ]


# ---- rendering ------------------------------------------------------------------------------------
def render_markdown(blocks: Iterable[Block]) -> str:
    """The blocks as GitHub Markdown; images are linked by file name (they sit beside report.md)."""
    out: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            out.append("#" * block[1] + " " + block[2])
        elif kind == "p":
            out.append(block[1])
        elif kind == "code":
            out.append("```toml\n" + block[1] + "\n```")
        elif kind == "img":
            out.append(f"![{block[1]}]({block[1]})\n\n*{block[2]}*")
        elif kind == "table":
            headers, rows = block[1], block[2]
            lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"


def render_html(blocks: Iterable[Block], folder: Path, *, title: str) -> str:
    """The blocks as one self-contained HTML page (figures embedded as base64 PNG)."""
    body: list[str] = []
    for block in blocks:
        kind = block[0]
        if kind == "h":
            body.append(f"<h{block[1]}>{_inline(block[2])}</h{block[1]}>")
        elif kind == "p":
            body.append(f"<p>{_inline(block[1])}</p>")
        elif kind == "code":
            body.append(f"<pre>{html.escape(block[1])}</pre>")
        elif kind == "img":
            data = base64.b64encode((folder / block[1]).read_bytes()).decode("ascii")
            body.append(f'<figure><img alt="{html.escape(block[1])}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{_inline(block[2])}</figcaption></figure>")
        elif kind == "table":
            head = "".join(f"<th>{_inline(h)}</th>" for h in block[1])
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in block[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
    style = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
             "table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}"
             "th{background:#f3f3f3}img{max-width:100%}figcaption{font-size:13px;color:#555}pre{background:#f6f6f6;padding:1em}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def _inline(text: Any) -> str:
    escaped = html.escape(str(text))
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escaped)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", escaped)


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


# ---- formatting -----------------------------------------------------------------------------------
def _num(value: Any, spec: str, suffix: str = "") -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "-"
    return f"{value:{spec}}{suffix}" if np.isfinite(value) else "-"


def _short(reason: Any) -> str:
    if reason is None or (isinstance(reason, float) and np.isnan(reason)):
        return "(no reason recorded)"
    text = " ".join(str(reason).split())
    return text if len(text) <= REASON_WIDTH else text[: REASON_WIDTH - 3] + "..."


def _text(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


# ---- command line ---------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder made by `python -m harness sweep` (holds rows.jsonl)")
    parser.add_argument("--no-maps", action="store_true", help="skip the effective attention maps (they run each variant on CPU)")
    parser.add_argument("--maps-n", type=int, default=64, metavar="N", help="N = M = D of the attention maps (default 64)")
    parser.add_argument("--maps-inputs", default=None, metavar="NAME", help="input distribution of the maps (default: local if measured)")
    parser.add_argument("--maps-uncalibrated", action="store_true",
                        help="draw learnable variants as built instead of fitting them at the maps' N first (faster, less telling)")
    parser.add_argument("--budget", type=float, action="append", default=None, metavar="ERR",
                        help=f"relative L2 error budget of the recommendation, repeatable (default {' and '.join(map(str, analysis.DEFAULT_BUDGETS))})")
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE", help="import a user's variants first (for the maps)")


def run(args: argparse.Namespace) -> int:
    from harness.cli import UsageError, load_plugins

    load_plugins(args.plugin)
    if args.maps_n < 2 or args.maps_n > 1024:
        raise UsageError(f"--maps-n {args.maps_n}: must be between 2 and 1024 (a heatmap of N x N weights); try 64")
    if args.maps_inputs is not None:
        from harness.inputs import parse_inputs

        try:
            parse_inputs(args.maps_inputs)  # an unknown distribution or knob, or a bad value
        except ValueError as exc:
            raise UsageError(f"--maps-inputs {args.maps_inputs}: {exc}") from None
    if args.budget and any(not (b > 0) for b in args.budget):
        raise UsageError(f"--budget {args.budget}: error budgets must be > 0, e.g. --budget 0.01")
    start = time.perf_counter()
    paths = write_report(args.run_dir, maps=not args.no_maps, maps_n=args.maps_n, maps_inputs=args.maps_inputs,
                         maps_calibrate=not args.maps_uncalibrated, budgets=tuple(args.budget or analysis.DEFAULT_BUDGETS))
    for path in paths:
        print(path)
    print(f"report written in {time.perf_counter() - start:.1f} s", flush=True)
    return 0
