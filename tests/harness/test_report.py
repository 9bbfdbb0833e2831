"""harness.report / plots / attention_maps / rows: every file from a synthetic run, failures shown, bad input explained."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from harness.attention_maps import attention_maps, effective_map, make_probe
from harness.cli import UsageError, main
from harness.plots import FIGURE_FILES, series_styles, variant_colors
from harness.report import write_report
from harness.rows import load_run, rows_frame
from synthetic_run import make_rows, write_run
from variants import attention_weights, build_variant, list_variants

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_report_from_a_run_with_failures_writes_every_file(tmp_path):
    run = write_run(tmp_path / "run", modes=("forward", "train"))
    written = write_report(run)
    names = {p.name for p in written}
    assert names == {"report.md", "report.html"} | set(FIGURE_FILES.values())
    for name in FIGURE_FILES.values():
        assert (run / name).read_bytes()[:8] == PNG_MAGIC
    md = (run / "report.md").read_text()
    # Failed cells are shown with their status and reason, never dropped.
    assert "| dense | 8192 | OOM |" in md and "CUDA out of memory. Tried to allocate 2.00 GiB" in md
    assert "| linformer | 256 | unsupported |" in md and "does not support causal=True" in md
    assert "| linformer | 8192 | error |" in md and "RuntimeError: planted failure" in md
    # The analysis is computed: the planted exponents and the crossover at N = 400 appear.
    assert "| float32 forward, non-causal, B=1 H=8 D=64 (cpu) | dense | 2.00 | 2.00 | 1024-4096 |" in md
    assert "| sliding_window | 1.00 | 1.00 | 2048-8192 | from N ~ 400;" in md
    assert "N=256-4096: **dense**; N=8192: **chunked**" in md
    # Published numbers beside ours, with the hardware named.
    assert "paper (NVIDIA V100)" in md and "| linformer | 2048 | 128 | 10.24x | 2.6x |" in md
    assert "ours (Synthetic CPU)" in md
    html = (run / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(FIGURE_FILES)  # self-contained
    for name in FIGURE_FILES.values():
        assert f"![{name}]({name})" in md


def test_report_of_an_empty_run_says_so(tmp_path):
    run = write_run(tmp_path / "empty", [])
    written = write_report(run)
    assert {p.name for p in written} == {"report.md", "report.html"}
    assert "This run has no rows" in (run / "report.md").read_text()


def test_report_of_an_all_failed_run_says_so(tmp_path):
    rows = [dict(r, status="error", reason=f"RuntimeError: boom {i}", latency_s=None) for i, r in enumerate(make_rows())]
    run = write_run(tmp_path / "failed", rows)
    written = write_report(run)
    md = (run / "report.md").read_text()
    assert "No cell ran successfully" in md and "RuntimeError: boom 0" in md
    assert {p.name for p in written} == {"report.md", "report.html"}


def test_report_of_a_run_without_dense(tmp_path):
    run = write_run(tmp_path / "nodense", make_rows(variants=("chunked", "linformer"), inputs=("gaussian",)))
    names = {p.name for p in write_report(run, maps=False)}
    assert FIGURE_FILES["speedup"] not in names and FIGURE_FILES["latency"] in names  # no baseline, no speed-up figure
    md = (run / "report.md").read_text()
    assert "error budget 0.1: N=256-8192: **linformer**." in md and "dense did not run" not in md


def test_truncated_last_line_is_skipped_with_a_warning(tmp_path):
    run = write_run(tmp_path / "killed", truncate_last=True)
    with pytest.warns(UserWarning, match="skipped last line, not valid JSON"):
        loaded = load_run(run)
    assert len(loaded.rows) == len(make_rows())
    with pytest.warns(UserWarning):
        write_report(run, maps=False)
    assert "Note: " in (run / "report.md").read_text() and "killed mid-write" in (run / "report.md").read_text()


def test_not_a_run_folder_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(UsageError, match="does not exist"):
        load_run(tmp_path / "nope")
    (tmp_path / "plain").mkdir()
    with pytest.raises(UsageError, match="is not a run folder: it has no rows.jsonl"):
        write_report(tmp_path / "plain")
    assert main(["report", str(tmp_path / "plain")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a run folder" in err


def test_rows_of_an_older_format(tmp_path):
    # Only the fields an early writer may have had: no mode, inputs, dtype, memory, quantiles, schema_version.
    old = [{"variant": r["variant"], "seq_len": r["seq_len"], "status": r["status"], "latency_s": r["latency_s"],
            "config": r["config"]} for r in make_rows(inputs=("gaussian",), with_failures=False)]
    run = write_run(tmp_path / "old", old)
    with pytest.warns(UserWarning, match="older row format, missing dtype, mode, inputs, peak_memory_bytes, rel_l2_error"):
        write_report(run, maps=False)
    md = (run / "report.md").read_text()
    assert "older row format" in md and "| dense | 1024 | ok | 1.05 ms | 1.00x | - |" in md
    # Not rows at all: a clear error, not a KeyError.
    (tmp_path / "alien").mkdir()
    (tmp_path / "alien" / "rows.jsonl").write_text(json.dumps({"model": "bert", "time": 1.0}) + "\n")
    with pytest.raises(UsageError, match="no row has the fields variant, seq_len, status"):
        load_run(tmp_path / "alien")


def test_cli_report(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    assert main(["report", str(run), "--no-maps", "--budget", "0.5"]) == 0
    out = capsys.readouterr().out
    assert str(run / "report.html") in out and "error budget 0.5" in (run / "report.md").read_text()
    assert main(["report", str(run), "--maps-n", "1"]) == 2
    assert "--maps-n 1" in capsys.readouterr().err
    assert main(["report", str(run), "--maps-inputs", "gausian"]) == 2
    assert "--maps-inputs gausian: Unknown inputs 'gausian'. Available: " in capsys.readouterr().err
    assert main(["report", str(run), "--maps-inputs", "local:scal=4"]) == 2
    assert "--maps-inputs local:scal=4: inputs 'local' has no knob 'scal'" in capsys.readouterr().err
    assert main(["report", str(run), "--budget", "-1"]) == 2
    assert "error budgets must be > 0" in capsys.readouterr().err


def test_one_colour_per_variant_in_every_figure():
    colors = variant_colors(["zeta", "dense", "alpha", "chunked"])
    assert colors["dense"] == "black" and colors["alpha"] != colors["zeta"]
    assert variant_colors(["alpha", "zeta"]) == {k: colors[k] for k in ("alpha", "zeta")}  # independent of who else ran
    frame = rows_frame([dict(r, config={"window": w}) for w in (64, 128) for r in make_rows(variants=("sliding_window",))]
                       + make_rows(variants=("dense",)))
    styles = series_styles(frame)
    assert styles["sliding_window(window=64)"]["color"] == styles["sliding_window(window=128)"]["color"]
    assert styles["sliding_window(window=64)"]["linestyle"] != styles["sliding_window(window=128)"]["linestyle"]


# ---- effective attention maps ---------------------------------------------------------------------
def test_identity_probe_recovers_the_exact_map_and_a_band():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 32, 32, generator=g), torch.randn(1, 1, 32, 32, generator=g)
    dense = effective_map(build_variant("dense", backend="reference"), q, k)
    assert np.allclose(dense, attention_weights(q, k)[0, 0].numpy(), atol=1e-5)
    causal = effective_map(build_variant("dense"), q, k, causal=True)
    assert np.abs(np.triu(causal, 1)).max() == 0.0
    if "sliding_window" in list_variants():
        sw = build_variant("sliding_window", window=4)
        band = attention_weights(q, k, pattern=sw.pattern)[0, 0].numpy()
        assert np.allclose(effective_map(sw, q, k), band, atol=1e-5)
        assert (band[0, 10:] == 0).all()  # the probe really distinguishes a band from dense


def test_a_variant_not_linear_in_v_gets_no_map():
    q = k = torch.randn(1, 1, 8, 8)

    def squares(q, k, v, *, causal=False):
        return torch.softmax(q @ k.transpose(-1, -2), -1) @ (v * v)

    with pytest.raises(ValueError, match="not linear in v"):
        effective_map(squares, q, k)


def test_maps_panels_explain_what_cannot_be_drawn(monkeypatch):
    from variants.dense import DenseAttention

    series = [("dense", "dense", {"backend": "auto"}), ("xf", "dense", {"backend": "xformers"}),
              ("linformer", "linformer", {"k": 16}), ("ghost", "ghost_attention", {})]
    maps = attention_maps(series, n=16, inputs="local", causal=True)
    panels = {p.label: p for p in maps.panels}
    assert panels["dense"].rel_error < 1e-5 and panels["dense"].weights.shape == (16, 16)
    assert panels["xf"].weights is not None and "drawn with auto" in panels["xf"].note
    assert panels["linformer"].weights is None and panels["linformer"].note.startswith("unsupported: does not support causal=True")
    assert panels["ghost"].weights is None and "not registered here" in panels["ghost"].note
    monkeypatch.setattr(DenseAttention, "linear_in_v", False, raising=False)
    opted_out = attention_maps(series[:1], n=16).panels[0]
    assert opted_out.weights is None and "linear_in_v = False" in opted_out.note


def test_probe_uses_the_registered_distribution_and_its_knobs():
    q, k, used = make_probe(8, "gaussian:scale=4", seed=3)
    q1, k1, _ = make_probe(8, "gaussian", seed=3)
    assert used == "gaussian:scale=4" and q.shape == k.shape == (1, 1, 8, 8)
    torch.testing.assert_close(q, 4 * q1)  # the knob reached the generator
    torch.testing.assert_close(k, k1)
    with pytest.raises(ValueError, match=r"inputs 'gaussian' has no knob 'rank'"):
        make_probe(8, "gaussian:rank=8")  # no silent fallback to other inputs
    with pytest.raises(ValueError, match=r"Unknown inputs 'gausian'.*Did you mean 'gaussian'"):
        make_probe(8, "gausian")


def test_model_eval_and_tasks_results_get_sections_and_shape_the_recommendation(tmp_path):
    from harness.accuracy_io import markdown_table, write_table

    run = write_run(tmp_path / "run")
    task_rows = [
        {"task": "mqar", "variant": "dense", "seq_len": 128, "status": "ok", "accuracy": 0.71, "delta_to_dense": 0.0},
        {"task": "mqar", "variant": "linformer", "config": {"k": 8, "max_seq_len": 4096}, "seq_len": 128, "status": "ok",
         "accuracy": 0.04, "delta_to_dense": -0.67},
        {"task": "mqar", "variant": "chunked", "seq_len": 128, "status": "ok", "accuracy": 0.70, "delta_to_dense": -0.01},
    ]
    write_table(run, "tasks", task_rows, {"preset": "cpu"})
    (run / "tasks.md").write_text(markdown_table(["task", "variant", "N=128"], [["mqar", "dense", "0.710"], ["mqar", "linformer", "0.040 (-0.670)"]]))
    eval_rows = [
        {"variant": "distilled", "max_len": 128, "status": "ok", "cosine_mean": 0.9255},
        {"variant": "chunked", "max_len": 128, "status": "ok", "cosine_mean": 1.0},
    ]
    write_table(run, "model_eval", eval_rows, {"model": "all-MiniLM-L6-v2"})
    (run / "model_eval.md").write_text(markdown_table(["variant", "cosine mean"], [["distilled", "0.92550"], ["chunked", "1.00000"]]))
    write_report(run, maps=False)
    md = (run / "report.md").read_text()
    assert "## Inside a pretrained model (model-eval)" in md and "| distilled | 0.92550 |" in md
    assert "## Trained from scratch on long-range tasks (tasks)" in md and "| mqar | linformer | 0.040 (-0.670) |" in md
    assert "these lose more than 5% accuracy against dense: linformer(k=8) (mqar N=128: -0.67)" in md  # non-default fields named
    assert "chunked (" not in md.split("**Trained tasks:**")[1].split("\n")[0]  # -0.01 is within the flag
    assert "below cosine 0.99: distilled (cosine 0.925 at 128 tokens)" in md
    assert "<table>" in (run / "report.html").read_text().split("Inside a pretrained model")[1]


def test_recommendation_also_answers_per_input_distribution(tmp_path):
    run = write_run(tmp_path / "run")  # gaussian and local rows
    write_report(run, maps=False)
    md = (run / "report.md").read_text()
    section = md.split("## Which one should I use")[1].split("\n## ")[0]
    assert "the answer for it alone" in section
    assert "Inputs gaussian: float32 forward" in section and "Inputs local: float32 forward" in section


def test_a_single_distribution_gets_no_per_distribution_answer(tmp_path):
    run = write_run(tmp_path / "run", inputs=("gaussian",))
    write_report(run, maps=False)
    assert "the answer for it alone" not in (run / "report.md").read_text()
