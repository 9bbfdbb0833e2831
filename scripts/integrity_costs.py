"""What the integrity guards cost (docs/reliability.md, "Integrity"): the inputs' checksum per cell against one dense
call and a whole cell, and a plugin cell in the local executor's plugin child (harness.executors.plugin_worker)
against the same cell in this process and in a process of its own (--executor subprocess); and what keeping plugins apart
from built-ins costs (harness.plugins): the check of a plugin's import, and a built-in cell's time in the local executor
with a plugin loaded against without, beside a plugin cell's.

    PYTHONPATH=. python scripts/integrity_costs.py [--lengths 1024,4096] [--repeats 5]

Times are medians of --repeats on this machine; compare the ratios printed, not seconds across machines.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def cell_for(variant: str, N: int, *, H: int = 8, D: int = 64):
    from harness.schema import Cell
    from variants import build_config

    return Cell(
        variant=variant,
        config=build_config(variant).to_dict(),
        seq_len=N,
        kv_len=N,
        batch=1,
        heads=H,
        head_dim=D,
        inputs="gaussian",
        dtype="float32",
        device="cpu",
        causal=False,
        mode="forward",
        seed=0,
    )


def main(argv: list[str]) -> int:
    from harness.executors.isolated import measure_isolated
    from harness.executors.plugin_worker import PluginWorker
    from harness.executors.worker import CellJob, run_cell
    from harness.measure import MeasureContext, MeasureSettings, RunInfo, measure_cell
    from harness.measure.context import checksums
    from variants import build_variant, load_plugin

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,4096")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    settings = MeasureSettings(time_budget_s=0.05, repeats=3, error_rows=64)
    run = RunInfo(run_id="costs", device_name="cpu", host="h", threads=torch.get_num_threads())
    print(f"torch threads {torch.get_num_threads()}; B=1 H=8 D=64 float32 forward")
    for N in map(int, args.lengths.split(",")):
        context = MeasureContext()
        cell = cell_for("dense", N)
        q, k, v = context.get_inputs(cell, torch.device("cpu"))
        dense = build_variant("dense")
        call_s = median_s(lambda: dense(q, k, v), args.repeats)
        check_s = median_s(lambda: checksums({"q": q, "k": k, "v": v}), args.repeats)
        cell_s = median_s(lambda: measure_cell(cell, settings, run, context), max(1, args.repeats // 2))
        print(
            f"N={N}: checksum of q, k, v {check_s * 1e3:.2f} ms = {check_s / call_s:.2f} dense calls "
            f"= {100 * check_s / cell_s:.2f}% of a {cell_s:.2f} s cell"
        )
    with tempfile.TemporaryDirectory() as tmp:
        plugin = Path(tmp) / "exact_plugin.py"
        plugin.write_text(
            "from variants import AttentionVariant, register_variant\n"
            "from variants.reference import reference_attention\n\n\n"
            "@register_variant('exact_plugin')\nclass ExactPlugin(AttentionVariant):\n"
            "    def forward(self, q, k, v, *, causal=False, kv_mask=None):\n"
            "        return reference_attention(q, k, v, causal=causal, dtype=None)\n"
        )
        load_plugin(str(plugin))
        job = CellJob(settings=settings.to_dict(), run=run.__dict__, plugins=(str(plugin),))
        cell = cell_for("exact_plugin", 256, H=2, D=16)
        context = MeasureContext()
        run_cell(cell, job, context)  # warm: the in-process path keeps its inputs and baseline between cells
        here_s = median_s(lambda: run_cell(cell, job, context), args.repeats)
        worker = PluginWorker(job)
        start = time.perf_counter()
        worker.measure(cell)  # starts the child
        first_s = time.perf_counter() - start
        next_s = median_s(lambda: worker.measure(cell), args.repeats)
        worker.close()
        child_s = median_s(lambda: measure_isolated(cell, job), max(1, args.repeats // 2))
        print(
            f"a plugin cell (N=256): in this process {here_s:.2f} s; in the local executor's plugin child "
            f"{first_s:.2f} s the first (the child's start), {next_s:.2f} s each next; "
            f"with --executor subprocess {child_s:.2f} s each"
        )
        plugins_apart(plugin, settings, run, args.repeats)
    return 0


def plugins_apart(plugin: Path, settings, run, repeats: int) -> None:
    """The import check's cost (two snapshots and their comparison), and a built-in cell (dense, N=256) measured by the
    local executor with and without a plugin loaded, beside the plugin's own cell, alternating so load hits each."""
    from harness.executors.local import LocalExecutor
    from harness.executors.worker import CellJob
    from harness.process_state import changes, snapshot

    check_s = median_s(lambda: changes(snapshot(), snapshot(), "none"), repeats)
    with_plugin = LocalExecutor(CellJob(settings=settings.to_dict(), run=run.__dict__, plugins=(str(plugin),)))
    without = LocalExecutor(CellJob(settings=settings.to_dict(), run=run.__dict__))
    built_in, own = cell_for("dense", 256, H=2, D=16), cell_for("exact_plugin", 256, H=2, D=16)
    for executor, cell in ((with_plugin, built_in), (without, built_in), (with_plugin, own)):
        executor.measure(cell)  # warm: inputs, baseline, the plugin child's start
    times: dict[str, list[float]] = {"without": [], "with": [], "plugin": []}
    for _ in range(repeats):
        for key, executor, cell in (
            ("without", without, built_in),
            ("with", with_plugin, built_in),
            ("plugin", with_plugin, own),
        ):
            times[key].append(median_s(lambda: executor.measure(cell), 1))
    with_plugin.close()
    medians = {key: statistics.median(values) for key, values in times.items()}
    print(
        f"plugins apart: the import check {check_s * 1e3:.1f} ms once per plugin and process; a built-in cell (N=256) "
        f"{medians['without']:.3f} s without a plugin loaded, {medians['with']:.3f} s with one "
        f"(ratio {medians['with'] / medians['without']:.2f}); a plugin cell in its child {medians['plugin']:.3f} s "
        f"(ratio {medians['plugin'] / medians['without']:.2f})"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
