"""How the studies' results are shown, in their own .md and in a run's report (read from <stem>.json, never from the .md).

`python -m harness model-eval --run RUN_DIR`, `tasks --run RUN_DIR` and `deploy --run RUN_DIR` (harness.studies) leave
<stem>.csv/.json/.md/.png in a run folder; <stem>.json is {"meta": {...}, "rows": [...]}. The
tables here are the ones the studies write into their .md, so the report and the .md agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from harness.entries import config_label
from harness.report.render import Block, Heading, Image, Paragraph, Table, format_number, short_reason
from harness.report.deploy_table import DEPLOY, WHAT as DEPLOY_WHAT, deploy_caveat, deployable_table
from harness.report.study_cells import KL_ROUNDING, budget_cells, budget_header, kl_text, variant_cell
from harness.report.study_outcomes import outcome_text, succeeded

MODEL_EVAL = "model_eval"  # the file stem harness.studies.model_eval writes
LM_EVAL = "lm_eval"  # the file stem harness.studies.lm_eval writes (model-eval --model on a causal LM)
TASKS = "tasks"  # the file stem harness.studies.tasks writes
TASK_LOSS_FLAG = 0.05  # accuracy points below dense that the recommendation calls out
MODEL_COSINE_FLAG = 0.99  # mean embedding cosine below which the recommendation calls a variant out


def model_eval_table(rows: list[dict[str, Any]]) -> Table:
    """One line per variant (budget) and length limit: cosine (mean, min), retrieval agreement, or the failure."""
    body = []
    for r in rows:
        mean_tokens = "-" if r.get("seq_len_mean") is None else str(round(r["seq_len_mean"]))
        head = [variant_cell(r), str(r.get("max_len")), *budget_cells(rows, r), mean_tokens]
        if succeeded(r):
            body.append(
                head
                + [
                    format_number(r.get("cosine_mean"), ".5f"),
                    format_number(r.get("cosine_min"), ".5f"),
                    format_number(r.get("retrieval_agreement"), ".3f"),
                    "",
                ]
            )
        else:
            body.append(head + ["-", "-", "-", outcome_text(r)])
    return Table(
        [
            "variant",
            "max_len",
            *budget_header(rows),
            "mean tokens",
            "cosine mean",
            "cosine min",
            "retrieval agreement",
            "note",
        ],
        body,
    )


def model_eval_note(model: str) -> str:
    return f"Each variant swapped into every layer of {model}; embeddings compared to the unmodified model over the evaluation passages."


# the generation columns: through transformers' KV cache, then through each layer's own decode state (lm_generate)
GENERATION_HEADERS = ("continuation agreement", "decode tokens/s", "own-state tokens/s", "own state MiB")


def lm_eval_table(rows: list[dict[str, Any]]) -> Table:
    """One line per variant (budget) and length: perplexity (the model's own), increase, top-1 agreement, KL, the
    generation columns (when generated: _generation_cells), or the failure."""
    generated = any(r.get("generation_status") for r in rows)
    body = []
    for r in rows:
        head = [variant_cell(r), str(r.get("seq_len")), *budget_cells(rows, r)]
        if not succeeded(r):
            body.append(head + ["-"] * (4 + len(GENERATION_HEADERS) if generated else 4) + [outcome_text(r)])
            continue
        numbers = [
            f"{format_number(r.get('perplexity'), '.4f')} ({format_number(r.get('perplexity_reference'), '.4f')})",
            format_number(r.get("perplexity_increase"), "+.2%"),
            format_number(r.get("top1_agreement"), ".4f"),
            kl_text(r.get("kl_mean")),
        ]
        cells, note = _generation_cells(r) if generated else ([], "")
        body.append(head + numbers + cells + [note])
    headers = ["variant", "N", *budget_header(rows), "perplexity (model)", "increase", "top-1 agreement"]
    return Table([*headers, "KL(dense||variant)", *(GENERATION_HEADERS if generated else ()), "note"], body)


def _generation_cells(r: dict[str, Any]) -> tuple[list[str], str]:
    """A row's GENERATION_HEADERS cells and its note: a generation that could not run has its status in the agreement
    cell and its reason in the note; an own-state path whose tokens differ from the KV cache's says so there."""
    if r.get("generation_status") not in ("ok", None):  # None: an older row, or a row not generated
        return [str(r.get("generation_status")), "-", "-", "-"], short_reason(r.get("generation_reason"), missing="")
    state_bytes, same = r.get("decode_state_bytes"), r.get("state_cache_agreement")
    cells = [
        format_number(r.get("continuation_agreement"), ".3f"),
        format_number(r.get("decode_tokens_per_s"), ".1f"),
        format_number(r.get("state_decode_tokens_per_s"), ".1f"),
        format_number(None if state_bytes is None else state_bytes / 2**20, ".2f"),
    ]
    return cells, ("" if same is None or same == 1 else f"own state: {same:.1%} of the KV cache path's tokens")


def lm_eval_note(model: str) -> str:
    return (
        f"Each variant swapped into the attention layers of {model}; next-token predictions compared to the "
        f"unmodified model over windows of N tokens of the evaluation text. {LM_GENERATION}"
    )


LM_GENERATION = (
    "Continuation agreement: the share of the tokens greedy generate() continues each window with that equal dense's, "
    "position by position; decode tokens/s of that generate call, on transformers' KV cache; own-state tokens/s and "
    "MiB: the same generation through each layer's own decode state (dense's KV cache, sliding_window's ring, the "
    "running sums), the states' bytes after the last prompt and its tokens (empty where the state path refuses; a "
    f"note where its tokens differ from the KV cache path's). A KL in [-{KL_ROUNDING:g}, 0) is float32 rounding of "
    "zero and shown as 0."
)


def tasks_table(rows: list[dict[str, Any]]) -> Table:
    """One line per task and variant (with the config it ran): test accuracy (delta to dense) per N, or the failure."""
    lens = sorted({r["seq_len"] for r in rows})
    body = []
    for task in dict.fromkeys(r["task"] for r in rows):
        for variant in dict.fromkeys(r["variant"] for r in rows):
            cells = [str(task), series_label(rows, variant)]
            for n in lens:
                r = next((r for r in rows if (r["task"], r["variant"], r["seq_len"]) == (task, variant, n)), None)
                if r is None:
                    cells.append("-")
                elif r.get("accuracy") is None:
                    cells.append(outcome_text(r, 60))
                elif r["variant"] == "dense" or r.get("delta_to_dense") is None:
                    cells.append(f"{r['accuracy']:.3f}")
                else:
                    cells.append(f"{r['accuracy']:.3f} ({r['delta_to_dense']:+.3f})")
            body.append(cells)
    return Table(["task", "variant"] + [f"N={n}" for n in lens], body)


def series_label(rows: list[dict[str, Any]], variant: str) -> str:
    """The variant with the config its rows ran, fields off their defaults named: 'sliding_window(window=16)'."""
    config = next((r["config"] for r in rows if r.get("variant") == variant and r.get("config")), None)
    return config_label(variant, config)


def equal_to_dense_notes(rows: list[dict[str, Any]]) -> list[str]:
    """One sentence per variant whose config makes it compute exactly what dense does at every length studied.

    An exact variant whose quality knob stops mattering at the key length (a window) and is at least the longest N
    studied covers every key: its row repeats dense's and says nothing about the variant.
    """
    from variants import get_variant  # torch: loaded only where a study's rows are shown

    notes, longest = [], max((r["seq_len"] for r in rows), default=0)
    for variant in dict.fromkeys(r["variant"] for r in rows):
        config = next((r["config"] for r in rows if r.get("variant") == variant and r.get("config")), None)
        try:
            spec = get_variant(variant)
        except (ValueError, TypeError):  # a plugin not loaded here
            continue
        knob = spec.cls.quality_knob
        if not (config and knob and knob.at_most_length and spec.capabilities.exact):
            continue
        value = config.get(knob.field)
        if isinstance(value, int) and value >= longest:
            notes.append(
                f"{config_label(variant, config, show=[knob.field])} covers every length studied ({knob.field} "
                f"{value} >= N = {longest}): it computes exactly what dense does, so its accuracy says nothing about "
                f"the {knob.field}; pass a smaller one (--set {variant}.{knob.field}=...)."
            )
    return notes


def tasks_note(rows: list[dict[str, Any]]) -> str:
    chance = ", ".join(sorted({f"{r['task']} {r['chance']:.3f}" for r in rows if r.get("chance") is not None}))
    majority = ", ".join(
        sorted({f"{r['task']} N={r['seq_len']} {r['majority']:.3f}" for r in rows if r.get("majority") is not None})
    )
    note = f"Test accuracy (delta to dense). Chance: {chance}. Majority class of the test set: {majority}."
    return " ".join([note, *equal_to_dense_notes(rows)])


# stem -> (section title, what it measured, its table)
STUDIES: dict[str, tuple[str, str, Callable[[list[dict[str, Any]]], Table]]] = {
    MODEL_EVAL: (
        "Inside a pretrained model (model-eval)",
        "Each variant swapped into every attention layer of all-MiniLM-L6-v2 (its weights kept): sentence-embedding "
        "cosine to the unmodified model and how often each passage's nearest neighbour stays the same.",
        model_eval_table,
    ),
    LM_EVAL: (
        "Inside your causal LM (model-eval --model)",
        "Each variant swapped into the model's attention layers (its weights kept): perplexity against the unmodified "
        "model's, next-token top-1 agreement and KL(dense || variant) at each length. " + LM_GENERATION,
        lm_eval_table,
    ),
    TASKS: (
        "Trained from scratch on long-range tasks (tasks)",
        "Tiny transformers of one size, one per variant, trained with the same budget on MQAR (associative recall) and "
        "ListOps; test accuracy, and in brackets the change against dense.",
        tasks_table,
    ),
    DEPLOY: ("Deployable? (deploy)", DEPLOY_WHAT, deployable_table),
}


def study_rows(folder: Path, stem: str) -> list[dict[str, Any]] | None:
    """The rows of <stem>.json in `folder`; None when there is no such file, [] when it cannot be read."""
    path = folder / f"{stem}.json"
    if not path.is_file():
        return None
    try:
        rows = json.loads(path.read_text(encoding="utf-8")).get("rows", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def study_sections(folder: Path, *, images_from: str = "") -> list[Block]:
    """A section per study result in the run folder: what it measured, its table, its figure (at images_from + name)."""
    blocks: list[Block] = []
    for stem, (title, what, table) in STUDIES.items():
        rows = study_rows(folder, stem)
        if rows is None:
            continue
        blocks += [Heading(2, title), Paragraph(what)]
        blocks.append(table(rows) if rows else Paragraph(f"{stem}.json has no readable rows."))
        if (folder / f"{stem}.png").is_file():
            blocks.append(Image(f"{images_from}{stem}.png", what))
    return blocks


def study_caveats(folder: Path) -> list[str]:
    """Sentences for the recommendation from the model-eval, tasks and deploy results in the run folder (if any)."""
    out = []
    losses: dict[str, list[str]] = {}
    for r in study_rows(folder, TASKS) or []:
        delta = r.get("delta_to_dense")
        if succeeded(r) and delta is not None and delta < -TASK_LOSS_FLAG:
            losses.setdefault(config_label(r["variant"], r.get("config")), []).append(
                f"{r['task']} N={r['seq_len']}: {delta:+.2f}"
            )
    if losses:
        parts = "; ".join(f"{v} ({', '.join(items)})" for v, items in sorted(losses.items()))
        out.append(
            f"**Trained tasks:** these lose more than {TASK_LOSS_FLAG:.0%} accuracy against dense: {parts}. "
            "A small error on random inputs does not guarantee a model trains as well."
        )
    weak = sorted(
        {
            f"{config_label(r['variant'], r.get('config'))} (cosine {r['cosine_mean']:.3f} at {r['max_len']} tokens)"
            for r in study_rows(folder, MODEL_EVAL) or []
            if succeeded(r) and r.get("cosine_mean") is not None and r["cosine_mean"] < MODEL_COSINE_FLAG
        }
    )
    if weak:
        out.append(
            f"**Inside a pretrained model:** swapped in without retraining, these move sentence embeddings "
            f"below cosine {MODEL_COSINE_FLAG}: {', '.join(weak)}."
        )
    deployable = deploy_caveat(study_rows(folder, DEPLOY) or [])
    return out + ([deployable] if deployable else [])
