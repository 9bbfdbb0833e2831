"""SweepSpec: what a sweep measures. Each field is a knob: its TOML key, flag and help are declared here once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.cell_rules import INT8_DYNAMIC
from harness.entries import format_entry
from harness.knobs import knob
from harness.error_metrics import ERROR_METRICS
import harness.spec.convert as c
from harness.spec.memory_size import memory_budget

DTYPES = ("float32", "bfloat16", "float16")
DTYPE_ALIASES = {
    "fp32": "float32",
    "f32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
}
MODES = ("forward", "train")
MODE_ALIASES = {"fwd": "forward", "training": "train", "backward": "train", "bwd": "train"}
ACCURACY_REFERENCES = ("full", "pattern")
CLOCKS = ("wall", "cpu")  # what a CPU run's speed-ups and answer come from (harness.report.clock)
PHASES = ("prefill", "decode")  # the values of each axis list: what the spec accepts
SCOPES = ("attention", "layer")
RECOMPUTES = ("none", "attention", "layer")
PRECISIONS = ("fp32", "autocast-bf16", "autocast-fp16", INT8_DYNAMIC)  # autocast: train; int8-dynamic: forward layer
KV_DTYPES = ("none", "int8", "fp8_e4m3")  # harness.measure.kv_quant
SCORES_DTYPES = ("none", "int8")  # harness.cell_rules: the scores as the variant computes them, or from int8 Q and K
# Keys added after the first spec.toml files were written, with the value a run's spec.toml without them means
# (the run predates them): a resumed run replays what it measured, not today's defaults.
# before error budgets: none; before stacks: 1 block; before timing processes: one
RESUMED_SPEC_DEFAULTS = {"error_budgets": [], "layer_depth": 1, "processes": 1}
MAX_PROCESSES = 16  # --processes: more adds process starts, not precision (the t quantile is near 2 by then)
# Keys that were renamed (every list of a cell axis is plural now): the old name is still read, with a one-line note.
RENAMED_KEYS = {"causal": "causals", "padding": "paddings", "scope": "scopes"}
# TOML-only table: variant -> {field = value}, applied to every entry of that variant
VARIANT_CONFIG_KEY = "variant_config"


@dataclass(frozen=True)
class VariantEntry:
    """One variant to sweep: its registry name, the config fields set for it, and the full config."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)  # fields given by the user (or a default)
    config: dict[str, Any] = field(default_factory=dict)  # asdict of the validated config

    @property
    def label(self) -> str:
        """``name`` or ``name:field=value,...`` (the overrides), as written on the command line."""
        return format_entry(self.name, self.overrides)


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """What a sweep measures; every field validated by build_spec. Fields without `parse` are validated there."""

    device: str = knob(flag="--device", help="cpu, cuda or cuda:N (default: cuda if present, else cpu)")
    variants: tuple[VariantEntry, ...] = knob(
        flag="--variants",
        metavar="LIST",
        repeatable=True,
        help="names or globs with config overrides: 'dense,sliding_window:window=512,backend=banded' (default: all registered)",
    )
    seq_lens: tuple[int, ...] = knob(
        flag="--seq-lens",
        metavar="LIST",
        parse=c.seq_lens,
        help="sequence lengths: '256,1k,4k' or a doubling range '256..8192'",
    )
    batch: int = knob(flag="--batch", metavar="B", parse=c.bounded_int(c.MAX_BATCH), help="batch size")
    heads: int = knob(flag="--heads", metavar="H", parse=c.bounded_int(c.MAX_HEADS), help="number of heads")
    kv_heads: tuple[int, ...] = knob(
        (),
        flag="--kv-heads",
        metavar="LIST",
        parse=c.optional_positive_ints,
        help="key/value heads (GQA; each must divide --heads), e.g. '8,2,1' (default: = heads)",
    )
    head_dims: tuple[int, ...] = knob(
        flag="--head-dims",
        old_flags=("--head-dim",),
        metavar="LIST",
        parse=c.positive_ints,
        help="head dims, e.g. '64,128'",
    )
    dtypes: tuple[str, ...] = knob(flag="--dtypes", metavar="LIST", help="float32, bfloat16 (bf16), float16 (fp16)")
    causals: tuple[bool, ...] = knob(
        flag="--causals", old_flags=("--causal",), metavar="LIST", parse=c.bools, help="false, true or both"
    )
    modes: tuple[str, ...] = knob(
        flag="--modes",
        metavar="LIST",
        parse=c.choices(MODES, MODE_ALIASES),
        help="forward (no grad), train (forward + backward)",
    )
    phases: tuple[str, ...] = knob(
        ("prefill",),
        flag="--phases",
        metavar="LIST",
        parse=c.choices(PHASES),
        help="prefill (one call on N tokens), decode (tokens generated one at a time after an N-token context; forward, causal)",
    )
    decode_steps: int = knob(
        32,
        flag="--decode-steps",
        metavar="S",
        parse=c.bounded_int(c.MAX_STEPS),
        help="tokens generated per timed decode call (latency is per token)",
    )
    paddings: tuple[float, ...] = knob(
        (0.0,),
        flag="--paddings",
        old_flags=("--padding",),
        metavar="LIST",
        parse=c.fractions,
        help="mean fraction of key positions that are padding, ragged over the batch (needs --batch >= 2), e.g. '0,0.25'",
    )
    scopes: tuple[str, ...] = knob(
        ("attention",),
        flag="--scopes",
        old_flags=("--scope",),
        metavar="LIST",
        parse=c.choices(SCOPES),
        help="attention (the variant alone), layer (a pre-norm transformer block around it)",
    )
    recomputes: tuple[str, ...] = knob(
        ("none",),
        flag="--recomputes",
        old_flags=("--recompute",),
        metavar="LIST",
        parse=c.choices(RECOMPUTES),
        help="train cells: none, attention (checkpoint the attention call), layer (checkpoint the block; --scopes layer)",
    )
    precisions: tuple[str, ...] = knob(
        ("fp32",),
        flag="--precisions",
        old_flags=("--precision",),
        metavar="LIST",
        parse=c.choices(PRECISIONS),
        help="fp32; train cells over --dtypes float32: autocast-bf16, autocast-fp16 (torch.autocast, float32 weights); "
        "forward layer cells on CPU: int8-dynamic (the blocks' projections dynamically quantized to int8)",
    )
    kv_dtypes: tuple[str, ...] = knob(
        ("none",),
        flag="--kv-dtypes",
        metavar="LIST",
        parse=c.choices(KV_DTYPES),
        help="forward cells, attention scope: K/V stored as none, int8 (per-token absmax scales) or fp8_e4m3 "
        "(torch.float8_e4m3fn, per-token scales), dequantized where the variant reads them",
    )
    scores_dtypes: tuple[str, ...] = knob(
        ("none",),
        flag="--scores-dtypes",
        metavar="LIST",
        parse=c.choices(SCORES_DTYPES),
        help="forward prefill cells, attention scope: none (the variant's scores), int8 (QK^T from Q and K quantized to "
        "int8 per token and head, an integer matmul; variants declaring Capabilities.int8_scores: dense)",
    )
    layer_depth: int = knob(
        2,
        flag="--layer-depth",
        metavar="L",
        parse=c.positive_int,
        help="blocks in a layer cell's stack (--scopes layer): recompute layer saves all but one block's activations",
    )
    inputs: tuple[str, ...] = knob(
        flag="--inputs", metavar="LIST", help="input distributions, e.g. 'gaussian,local,gaussian:scale=4'"
    )
    seed: int = knob(
        flag="--seed",
        parse=lambda v, w: c.to_int(v, w, minimum=0, maximum=2**63 - 1),
        help="evaluation seed (calibration uses other seeds)",
    )
    plugins: tuple[str, ...] = knob(
        (),
        flag="--plugin",
        metavar="MODULE_OR_FILE",
        repeatable=True,
        parse=c.texts,
        help="import a user's variants first (repeatable)",
    )
    time_budget_s: float = knob(
        flag="--time-budget", metavar="SECONDS", group="how", parse=c.positive_number, help="seconds of timing per cell"
    )
    repeats: int = knob(
        flag="--repeats",
        metavar="N",
        group="how",
        parse=c.bounded_int(c.MAX_STEPS),
        help="at least N timed calls per cell",
    )
    processes: int = knob(
        1,
        flag="--processes",
        metavar="P",
        group="how",
        parse=c.timing_processes(MAX_PROCESSES),
        help="processes each paired cell is timed in: 1, or 3 and more (P-1 time it again after the sweep, each a fresh "
        "process); its speed-up's interval is then over them and holds the next run (docs/timing.md)",
    )
    cell_timeout_s: float | None = knob(
        flag="--timeout",
        metavar="SECONDS",
        group="how",
        parse=c.timeout,
        help="per-cell limit, its search and calibration not counted; a cell past it becomes a 'timeout' row (0: none)",
    )
    fit_timeout_s: float | None = knob(
        flag="--fit-timeout",
        metavar="SECONDS",
        group="how",
        parse=c.timeout,
        help="a cell's error-budget search and calibration together; past it the row is 'fit_timeout' (0: none)",
    )
    error_rows: int = knob(
        flag="--error-rows",
        metavar="R",
        group="how",
        parse=c.bounded_int(c.MAX_SEQ_LEN, minimum=2),
        help="query rows sampled for the float64 accuracy check",
    )
    calibration_steps: int = knob(
        flag="--calibration-steps",
        metavar="STEPS",
        group="how",
        parse=c.bounded_int(c.MAX_STEPS, minimum=0),
        help="optimizer steps for learnable variants",
    )
    calibration_batches: int = knob(
        group="how", parse=c.bounded_int(c.MAX_BATCH), help="calibration batches (seeds other than the evaluation's)"
    )
    calibration_max_seq_len: int = knob(
        group="how", parse=c.bounded_int(c.MAX_SEQ_LEN), help="calibration length is min(N, this)"
    )
    error_budgets: tuple[float, ...] = knob(
        (),
        flag="--error-budgets",
        metavar="LIST",
        parse=c.budgets,
        help="error budgets, e.g. '0.01,0.05,0.1': each variant with a quality knob (window, k, features) is searched on "
        "calibration seeds for the cheapest value within each budget, and that config is measured (none: configs as given)",
    )
    error_metric: str = knob(
        "rel_l2",
        flag="--error-metric",
        metavar="METRIC",
        parse=c.choices(ERROR_METRICS, single=True),
        help="what a budget bounds: rel_l2 (relative L2 error of the output) or cosine (1 - cosine similarity)",
    )
    accuracy_reference: str = knob(
        group="how",
        parse=c.choices(ACCURACY_REFERENCES, single=True),
        help="full: error vs exact softmax attention | pattern: vs the variant's own sparsity pattern",
    )
    clock: str = knob(
        "wall",
        flag="--clock",
        metavar="CLOCK",
        group="how",
        parse=c.choices(CLOCKS, single=True),
        help="what a CPU run's speed-ups and answer come from: wall (default) or cpu (the timing thread's CPU time, "
        "for a machine other jobs share; both are measured, `report --clock` can switch; docs/timing.md)",
    )
    memory_budget: int | str | None = knob(
        None,
        flag="--memory-budget",
        metavar="SIZE",
        parse=memory_budget,
        help="after the planned cells, search each train series (variant x recompute x precision) for the longest N "
        "whose peak memory fits this budget: '2GiB', '80GiB', or 'device' (its memory); doubling, then bisection on N",
    )
    # Where cells run: the executor's name here; its own options (validated by harness.executors) beside it.
    executor: str = knob(
        "local",
        flag="--executor",
        metavar="NAME",
        group="where",
        parse=lambda v, w: str(v).strip().lower(),
        help="local (default), subprocess, ray or slurm",
    )
    # the executor's option keys (ray_address, slurm_*, ...)
    executor_options: dict[str, Any] = field(default_factory=dict)
    device_was_auto: bool = False  # the device came from "auto" (a remote executor needs an explicit one); not written
    # key -> where its value came from, for messages
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    def where(self, key: str) -> str:
        """Where a key's value came from ('--slurm-time', 'sweep.toml: slurm_time_min'), for a message."""
        return self.sources.get(key, key)

    @property
    def device_type(self) -> str:
        return self.device.split(":")[0]
