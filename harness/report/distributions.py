"""The report's "Attention distributions of the inputs": what exact attention looks like on each input distribution the
run measured, so a reader sees why a window, sinks or a low-rank projection win or lose on those inputs.

Read, never recomputed: the sweep stored one record per inputs key (harness.executors.distributions, from the sampled
rows of the accuracy check: harness.measure.distribution). The table gives per record and head kind the heads' share
and their mean entropy (with uniform's), mass on the first tokens and within 16/64/256 tokens; the figure
(distributions.png, declared in harness.report.figures) each head at the longest N, sorted by entropy, coloured by kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.measure.distribution import (
    DISTRIBUTION_FIELDS,
    FIRST_TOKENS,
    KIND_RULE,
    KINDS,
    LOCAL_MASS,
    SINK_MASS,
    WINDOWS,
)
from harness.report import plotting
from harness.report.plotting import Drawn
from harness.report.render import Paragraph, Table, format_n, format_number

KIND_COLORS = {"sink": "#d62728", "local": "#1f77b4", "diffuse": "#7f7f7f", "mixed": "#9467bd"}
LENGTHS = ("seq_len", "kv_len")  # the key fields a figure panel takes its longest of
_NAMES = {"batch": "B", "heads": "H", "kv_heads": "H_kv", "head_dim": "D", "padding": "pad", "seed": "seed"}


def setting_text(key: dict[str, Any], varying: set[str]) -> str:
    """The record's fields other than inputs and the lengths that differ between the run's records ('causal H=8')."""
    parts = []
    for name in DISTRIBUTION_FIELDS:
        if name not in varying or name in ("inputs", *LENGTHS):
            continue
        value = key[name]
        parts.append(("causal" if value else "non-causal") if name == "causal" else f"{_NAMES[name]}={value}")
    return " ".join(parts)


def varying_fields(records: list[dict[str, Any]]) -> set[str]:
    """The key fields whose values differ between records."""
    return {name for name in DISTRIBUTION_FIELDS if len({str(r["key"][name]) for r in records}) > 1}


def kind_means(record: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per head kind present: the heads' count and the mean of each metric over them."""
    out = {}
    for kind in KINDS:
        heads = [h for h in record["heads"] if h["kind"] == kind]
        if heads:
            names = [n for n in heads[0] if n not in ("batch", "head", "kind")]
            out[kind] = {"count": len(heads), **{n: sum(h[n] for h in heads) / len(heads) for n in names}}
    return out


def distribution_table(records: list[dict[str, Any]]) -> Table:
    """One line per record and head kind: inputs, N (M where it differs), the varying setting, the kind, its heads
    (count of all, share), mean entropy with uniform's, mass on the first token and FIRST_TOKENS, within each window."""
    varying = varying_fields(records)
    headers = ["inputs", "N", "setting", "kind", "heads", "entropy (nats)", "uniform's", "first token"]
    headers += [f"first {FIRST_TOKENS}", *(f"within {w}" for w in WINDOWS)]
    rows = []
    for record in records:
        key, total = record["key"], len(record["heads"])
        length = format_n(key["seq_len"]) + (
            "" if key["kv_len"] == key["seq_len"] else f", M={format_n(key['kv_len'])}"
        )
        for kind, m in kind_means(record).items():
            masses = [m["first_1"], m["first_4"], *(m[f"within_{w}"] for w in WINDOWS)]
            rows.append(
                [
                    key["inputs"],
                    length,
                    setting_text(key, varying) or "-",
                    kind,
                    f"{m['count']} of {total} ({m['count'] / total:.0%})",
                ]
                + [format_number(m["entropy"], ".2f"), format_number(m["uniform_entropy"], ".2f")]
                + [format_number(x, ".2f") for x in masses]
            )
    if "setting" in headers and not any(row[2] != "-" for row in rows):
        headers.pop(2)
        rows = [row[:2] + row[3:] for row in rows]
    return Table(headers, rows)


def longest(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per key without its lengths, the record of the longest N (the figure's panels), in the records' order."""
    best: dict[str, dict[str, Any]] = {}
    for record in records:
        group = str([record["key"][n] for n in DISTRIBUTION_FIELDS if n not in LENGTHS])
        if group not in best or record["key"]["seq_len"] > best[group]["key"]["seq_len"]:
            best[group] = record
    return list(best.values())


def plot_distributions(records: list[dict[str, Any]], path: Path) -> Drawn | None:
    """distributions.png: per panel (inputs at its longest N) each head's entropy as a bar, heads sorted by entropy and
    coloured by kind, uniform's mean entropy dashed; on the right axis each head's mass on the first tokens and within
    the first window. The table and the rule follow it."""
    if not records:
        return None
    panels, varying = longest(records), varying_fields(records)
    plt, fig, axes = plotting.grid(len(panels), width=max(4.0, 0.32 * max(len(r["heads"]) for r in panels) + 1.5))
    for ax, record in zip(axes, panels):
        _panel(ax, record, varying)
    handles = [plt.Rectangle((0, 0), 1, 1, color=KIND_COLORS[k], label=k) for k in KINDS]
    handles += [
        plt.Line2D([], [], color="black", linestyle="--", label="uniform's entropy (mean)"),
        plt.Line2D([], [], color="black", marker="^", linestyle="none", label=f"mass on the first {FIRST_TOKENS}"),
        plt.Line2D([], [], color="black", marker="o", mfc="white", linestyle="none", label=f"mass within {WINDOWS[0]}"),
        plt.Line2D([], [], color="black", linestyle=":", label="the sink and local rules' mass"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=8, frameon=False)  # under the panels
    fig.suptitle("Attention per head: entropy (bars)\nand where the mass goes (points)", fontsize=11)
    plotting.save(plt, fig, path)
    rule = Paragraph(f"A head's kind: {KIND_RULE}. Means over the heads of each kind:")
    return Drawn(path, after=[rule, distribution_table(records)])


def _panel(ax, record: dict[str, Any], varying: set[str]) -> None:
    """One record's heads, sorted by entropy: bars coloured by kind, masses on a 0..1 axis at the right."""
    heads = sorted(record["heads"], key=lambda h: h["entropy"])
    x = range(len(heads))
    ax.bar(x, [h["entropy"] for h in heads], color=[KIND_COLORS[h["kind"]] for h in heads])
    uniform = sum(h["uniform_entropy"] for h in heads) / len(heads)
    ax.axhline(uniform, color="black", linestyle="--", linewidth=0.9)
    ax.text(0.01, uniform, f" uniform {uniform:.2f}", transform=ax.get_yaxis_transform(), va="bottom", fontsize=7)
    ax.set_ylim(0, uniform * 1.08)
    ax.set_ylabel("entropy (nats)")
    several = len({h["batch"] for h in heads}) > 1
    ax.set_xticks(list(x), [f"b{h['batch']}h{h['head']}" if several else f"h{h['head']}" for h in heads], fontsize=7)
    ax.set_xlabel("head (sorted by entropy)")
    mass = ax.twinx()
    mass.plot(x, [h["first_4"] for h in heads], "^", color="black", markersize=5)
    mass.plot(x, [h[f"within_{WINDOWS[0]}"] for h in heads], "o", color="black", mfc="white", markersize=5)
    for level in sorted({SINK_MASS, LOCAL_MASS}):  # the rules' thresholds: a point above one names the kind
        mass.axhline(level, color="black", linestyle=":", linewidth=0.8)
    mass.set_ylim(0, 1.05)
    mass.set_ylabel("mass")
    key = record["key"]
    title = f"{key['inputs']}, N={format_n(key['seq_len'])}"
    ax.set_title(" ".join([title, setting_text(key, varying)]).strip(), fontsize=9)
