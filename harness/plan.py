"""spec -> cells: the list of measurements a sweep makes, in order. Pure: no device (the registry only for length fields).

Order: for each value of the Cell fields that are axes (harness.schema: inputs, dtype, head dim, causal, mode,
phase, scope, kv heads, padding, recompute, precision, kv dtype, scores dtype, outermost first), lengths ascending,
and at each length every variant. Decode cells are planned for mode forward only (decoding is inference) and are
always causal (one per causal setting collapses into one cell); the memory tricks (recompute, precision) are planned
for train cells only, a quantized K/V store for forward cells at the attention scope only, int8-dynamic projections
for forward layer cells on CPU only (harness.cell_rules.tricks_reason); int8 scores for forward prefill cells at the
attention scope of the variants that declare them only (harness.cell_rules.scores_reason). So consecutive cells share
their q, k, v (generated once), and a variant meets its lengths in ascending order (an OOM at N marks longer N as OOM
untried).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Iterator, Mapping, Sequence

from harness.cell_rules import scores_reason, tricks_reason
from harness.schema import DECLARED, Cell
from harness.spec.build import describe
from harness.spec.sweep_spec import SweepSpec
from variants import get_variant


def plan(spec: SweepSpec) -> list[Cell]:
    """Every cell of the spec, in measuring order, without duplicates.

    A variant's length fields (AttentionVariant.length_fields, e.g. Linformer's max_seq_len) follow
    each cell's N unless the user set them, so no default is sized for another length. With error
    budgets, a variant with a quality knob gets one cell per budget (matched_budget; see _budgets).
    """
    cells: dict[str, Cell] = {}
    for series in _series(spec):
        for seq_len in sorted(spec.seq_lens):
            for at in series:
                cell = at(seq_len)
                cells.setdefault(cell.cell_id, cell)
    return list(cells.values())


def plan_header(spec: SweepSpec) -> str:
    """The dry run's first line: the spec's dimensions (harness.spec.describe) whose factors multiply to the cells
    planned: variants become series where error budgets multiply some, skipped combinations of settings are counted."""
    line = describe(spec)
    settings = {tuple(sorted(s.items())) for s in _settings(spec)}  # decode's causal settings collapse into one
    full = math.prod(len(getattr(spec, s.axis) or (None,)) for s in DECLARED.values() if s.axis)
    budgeted = [
        e.name
        for e in spec.variants
        if len(matched_budgets(spec.error_budgets, get_variant(e.name).cls, e.overrides)) > 1
    ]
    series = len(spec.variants) + len(budgeted) * (len(spec.error_budgets) - 1)
    refused = sum(  # the (setting, series) pairs a variant refuses by what it declares: not planned
        len(matched_budgets(spec.error_budgets, get_variant(e.name).cls, e.overrides))
        for setting in settings
        for e in _refused(spec, dict(setting))
    )
    if budgeted:
        budgets = ", ".join(f"{b:g}" for b in spec.error_budgets)
        line = line.replace(
            f"{len(spec.variants)} variants",
            f"{series} series ({len(spec.variants)} variants; {len(budgeted)} of them once per error budget {budgets})",
            1,
        )
    if len(settings) != full:
        line += (
            f"; {len(settings)} of the {full} combinations of settings planned (decode: forward and causal only; "
            "recompute and autocast: train only; kv_dtype: forward, attention scope; int8-dynamic: forward, layer scope, "
            "CPU; scores_dtype int8: forward prefill, attention scope)"
        )
    if refused:
        line += f"; less {refused} (series, setting) refused by their variant (scores_dtype int8 needs int8_scores)"
    return line + f" = {(series * len(settings) - refused) * len(spec.seq_lens)} cells"


def length_series(spec: SweepSpec) -> list[Callable[[int], Cell]]:
    """Per series of the plan (its cells but for their length), N -> its cell at N, in planning order, without
    duplicates: what a search over N (the memory budget's) makes its cells with."""
    found: dict[str, Callable[[int], Cell]] = {}
    for series in _series(spec):
        for at in series:
            found.setdefault(at(min(spec.seq_lens)).series_key, at)
    return list(found.values())


def _series(spec: SweepSpec) -> Iterator[list[Callable[[int], Cell]]]:
    """Per setting (the axes' product), the series of every variant entry and budget: N -> the cell at N."""
    classes = {entry.name: get_variant(entry.name).cls for entry in spec.variants}
    for setting in _settings(spec):
        series, refused = [], _refused(spec, setting)
        for entry in (e for e in spec.variants if e not in refused):  # a cell made by hand is refused in measuring
            for budget in matched_budgets(spec.error_budgets, classes[entry.name], entry.overrides):
                matched = dict(matched_budget=budget, error_metric=spec.error_metric) if budget is not None else {}
                series.append(partial(_cell, spec, classes[entry.name], entry, {**setting, **matched}))
        yield series


def _refused(spec: SweepSpec, setting: dict[str, Any]) -> list[Any]:
    """The spec's variant entries that refuse a planned setting by what their class declares: int8 scores without
    Capabilities.int8_scores (harness.cell_rules)."""
    return [e for e in spec.variants if scores_reason(setting, get_variant(e.name).cls.capabilities) is not None]


def _cell(spec: SweepSpec, cls: Any, entry: Any, setting: dict[str, Any], seq_len: int) -> Cell:
    return Cell(
        variant=entry.name,
        config=cls.config_for_length(dict(entry.config), seq_len, fixed=entry.overrides),
        seq_len=seq_len,
        kv_len=seq_len,
        batch=spec.batch,
        heads=spec.heads,
        device=spec.device_type,
        seed=spec.seed,
        layer_depth=spec.layer_depth if setting.get("scope") == "layer" else 1,
        **setting,
    )


def matched_budgets(budgets: tuple[float, ...], cls: Any, overrides: dict[str, Any]) -> tuple[float | None, ...]:
    """The budgets a variant class is matched to: each of `budgets` when it declares a quality knob the user left free
    (neither the knob nor a field searched with it in `overrides`; its config as given is then not measured: the
    search chooses it); else (None,), the config as given. The sweep and model-eval share it."""
    knob = cls.quality_knob
    if not budgets or knob is None or set(knob.fields) & set(overrides):
        return (None,)
    return tuple(budgets)


def _settings(spec: SweepSpec) -> Iterator[dict[str, Any]]:
    """The product of the spec's lists of every Cell field that declares one (CellField.axis), in Cell field order (an
    empty list: the field's default); decode is planned for forward and causal only; a combination tricks_reason
    refuses is skipped."""
    for setting, reason in _combinations(spec):
        if reason is None:
            yield setting


def skipped_reasons(spec: SweepSpec) -> list[str]:
    """Why the spec's skipped combinations of settings are skipped (tricks_reason's and scores_reason's words), and its
    variants' series a setting is refused for (scores_reason's, by what they declare), each once, in plan order."""
    reasons = [reason for _, reason in _combinations(spec) if reason is not None]
    for setting in _settings(spec):
        for entry in _refused(spec, setting):
            reasons.append(f"{entry.name}: {scores_reason(setting, get_variant(entry.name).cls.capabilities)}")
    return list(dict.fromkeys(reasons))


def _combinations(spec: SweepSpec) -> Iterator[tuple[dict[str, Any], str | None]]:
    """Every combination of the axes' values (decode's made forward and causal, or left out) with tricks_reason's verdict
    on it on the spec's device."""
    names = [name for name, declared in DECLARED.items() if declared.axis]
    lists = [getattr(spec, DECLARED[name].axis) or (None,) for name in names]
    for values in itertools.product(*lists):
        setting = {name: value for name, value in zip(names, values) if value is not None}
        if setting.get("phase") == "decode":
            if setting.get("mode") != "forward":
                continue
            setting["causal"] = True  # decoding is causal: the causal settings collapse into one cell
        values = {**setting, "device": spec.device_type}
        yield setting, tricks_reason(values) or scores_reason(values)


# The memory budget search (SweepSpec.memory_budget): per train series, the longest N whose peak memory fits, by
# doubling N from the planned lengths, then bisection between the longest N that fits and the shortest that does not,
# to within an eighth (on multiples of 64). Pure: it walks the rows measured so far and names the next N to measure.
MAX_SEARCHED_SEQ_LEN = 1 << 20  # doubling stops here
MIN_SEARCHED_SEQ_LEN = 64  # halving (when no planned N fits) stops here


@dataclass(frozen=True)
class Longest:
    """Where a series' search stands: the longest N that fits, the shortest N above it that does not (and why), and the
    next N to measure (None: the search is over)."""

    fits: int | None  # None: no N measured fits
    fails: int | None  # None: none above `fits` failed (the search stopped at MAX_SEARCHED_SEQ_LEN)
    why: str | None  # why `fails` fails: "over budget" or its status (oom, timeout, error, unsupported...)
    next: int | None = None


def memory_verdict(status: str | None, peak_memory_bytes: float | None, budget: int) -> str | None:
    """None when a row's train step fits the budget (ok, peak memory measured and within it), else why not."""
    if status != "ok":
        return str(status)
    peak = peak_memory_bytes
    if peak is None or peak != peak:  # NaN in a frame
        return "no peak memory"
    return None if peak <= budget else "over budget"


def longest_within(verdicts: Mapping[int, str | None]) -> Longest:
    """From N -> memory_verdict: the shortest N that does not fit, and the longest N below it that fits."""
    failed = [n for n, why in verdicts.items() if why is not None]
    fails = min(failed) if failed else None
    fitting = [n for n, why in verdicts.items() if why is None and (fails is None or n < fails)]
    return Longest(max(fitting) if fitting else None, fails, verdicts[fails] if fails is not None else None)


def search_over(fits: int, fails: int | None) -> bool:
    """Whether a series' search has its answer, given the longest N that fits and the shortest above it that does not
    (None: none measured): doubling is over past MAX_SEARCHED_SEQ_LEN, bisection once the two are within an eighth (or
    64) of each other or no multiple of 64 lies between. A search stopped before (Ctrl-C, a time limit) is not."""
    if fails is None:
        return 2 * fits > MAX_SEARCHED_SEQ_LEN
    middle = (fits + fails) // 128 * 64
    return fails - fits <= max(64, fits // 8) or not fits < middle < fails


def search_longest(verdict_at: Callable[[int], str | None | bool], start: Sequence[int]) -> Longest:
    """Walk the search from the planned lengths `start`: verdict_at(N) is memory_verdict of N's row, or False when N
    has no row yet (then it is the next N to measure). Deterministic, so a resumed run walks the same path."""
    verdicts = {n: v for n in start if (v := verdict_at(n)) is not False}
    while True:
        at = longest_within(verdicts)
        lo, hi = at.fits, at.fails
        if lo is None and hi is None:
            return at  # nothing planned was measured
        if hi is None:
            if search_over(lo, None):
                return at
            n = 2 * lo
        elif lo is None:
            n = hi // 2
            if n < MIN_SEARCHED_SEQ_LEN:
                return at
        else:
            if search_over(lo, hi):
                return at
            n = (lo + hi) // 128 * 64  # the middle, on a multiple of 64
        verdict = verdict_at(n)
        if verdict is False:
            return dataclasses.replace(at, next=n)
        verdicts[n] = verdict
