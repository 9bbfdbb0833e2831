"""The sweep spec: defaults < TOML < CLI, every bad value one UsageError naming where it came from."""

from __future__ import annotations

import pytest
import torch

from harness.errors import UsageError
from harness.runner import sweep_spec as build_spec
from harness.spec import spec_to_toml


def test_cpu_default_spans_256_to_8192_in_float32():
    spec = build_spec(cli={"device": "cpu"})
    assert spec.seq_lens == (256, 512, 1024, 2048, 4096, 8192)
    assert spec.dtypes == ("float32",)
    assert {e.name for e in spec.variants} >= {"dense"}
    linformer = [e for e in spec.variants if e.name == "linformer"]
    if linformer:  # no default sized for another length: max_seq_len follows each cell's N (harness.plan)
        assert "max_seq_len" not in linformer[0].overrides


def test_cli_overrides_toml_overrides_default(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text('seq_lens = [64, 128]\nheads = 3\nvariants = ["dense"]\n')
    spec = build_spec(toml_path=path, cli={"device": "cpu", "heads": "5", "dtypes": "bf16"})
    assert spec.seq_lens == (64, 128)  # from the file
    assert spec.heads == 5  # the flag wins
    assert spec.dtypes == ("bfloat16",)  # alias
    assert spec.batch == 1  # the default shows through


def test_seq_len_forms():
    spec = build_spec(cli={"device": "cpu", "seq_lens": "256..1024,4k", "variants": "dense"})
    assert spec.seq_lens == (256, 512, 1024, 4096)


def test_variant_overrides_are_coerced_to_field_types(test_variants):
    spec = build_spec(
        cli={"device": "cpu", "variants": ["dense:backend=reference", "t_oom:oom_from=64,t_sleep:seconds=1e-3"]}
    )
    assert [e.label for e in spec.variants] == ["dense:backend=reference", "t_oom:oom_from=64", "t_sleep:seconds=0.001"]
    assert spec.variants[1].config == {"oom_from": 64}  # int, not "64"
    assert spec.variants[2].config == {"seconds": 0.001}
    with pytest.raises(UsageError, match=r"t_oom:oom_from=lots: expected int, got 'lots'"):
        build_spec(cli={"device": "cpu", "variants": "t_oom:oom_from=lots"})
    # a fractional value for an int field is refused, never truncated (oom_from=64.5 is not 64)
    with pytest.raises(UsageError, match=r"t_oom:oom_from=64.5: expected int, got '64.5'"):
        build_spec(cli={"device": "cpu", "variants": "t_oom:oom_from=64.5"})


def test_variant_list_with_commas_inside_an_entry():
    from harness.entries import split_entries

    assert split_entries("dense,sliding_window:window=512,backend=banded,chunked") == [
        "dense",
        "sliding_window:window=512,backend=banded",
        "chunked",
    ]


def test_toml_inline_table_variant(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('variants = [{name = "dense", backend = "reference"}, "dense"]\n')
    spec = build_spec(toml_path=path, cli={"device": "cpu"})
    assert [e.config["backend"] for e in spec.variants] == ["reference", "auto"]


def test_glob_expands_to_registered_variants():
    from variants import list_variants

    spec = build_spec(cli={"device": "cpu", "variants": "*"})
    assert sorted(e.name for e in spec.variants) == list_variants()


def test_effective_spec_round_trips_through_toml(tmp_path):
    spec = build_spec(
        cli={
            "device": "cpu",
            "variants": "dense:backend=reference,dense",
            "seq_lens": "64,128",
            "causal": "both",
            "modes": "forward,train",
            "inputs": "gaussian:scale=4,local",
            "cell_timeout_s": "0",
            "error_budgets": "0.1,0.02",
            "error_metric": "cosine",
        }
    )
    assert spec.error_budgets == (0.02, 0.1)
    path = tmp_path / "spec.toml"
    path.write_text(spec_to_toml(spec))
    assert build_spec(toml_path=path) == spec


@pytest.mark.parametrize(
    "cli,match",
    [
        ({"variants": "dens"}, r"--variants: Unknown variant 'dens'.*Did you mean 'dense'"),
        ({"variants": "nothing_*"}, r"no registered variant matches 'nothing_\*'"),
        ({"variants": "dense:backnd=sdpa"}, r"no config field 'backnd'.*Did you mean 'backend'"),
        ({"variants": "dense:backend=cuda_magic"}, r"backend must be one of"),
        ({"variants": "dense:backend"}, r"is not field=value"),
        ({"seq_lens": "0"}, r"--seq-lens: sequence lengths must be positive integers, got 0"),
        ({"seq_lens": "128,-5"}, r"--seq-lens: sequence lengths must be positive integers, got -5"),
        ({"seq_lens": "12x"}, r"--seq-lens: '12x' is not a length"),
        ({"seq_lens": "1024..256"}, r"runs backwards"),
        ({"batch": "0"}, r"--batch: must be >= 1, got 0"),
        ({"head_dims": "sixty"}, r"--head-dims: expected an integer, got 'sixty'"),
        ({"dtypes": "float8"}, r"--dtypes: unknown value 'float8'"),
        ({"dtypes": "fp16"}, r"--dtypes: float16 on cpu: .*use float32 or bfloat16"),
        ({"modes": "fwd,backprop"}, r"--modes: unknown value 'backprop'"),
        ({"causal": "maybe"}, r"--causals: expected true, false or both"),
        ({"inputs": "gausian"}, r"--inputs: Unknown inputs 'gausian'.*Did you mean 'gaussian'"),
        ({"inputs": "gaussian:scal=2"}, r"no parameter 'scal'.*Did you mean 'scale'"),
        ({"inputs": "gaussian:scale=big"}, r"parameter 'scale': expected float"),
        ({"time_budget_s": "-1"}, r"--time-budget: must be > 0"),
        ({"device": "tpu"}, r"--device: device must be 'cpu', 'cuda'"),
        (
            {"error_budgets": "0.1,0"},
            r"--error-budgets: an error budget must be in \(0, 2\].*got '0'; e.g. --error-budgets 0.01,0.05,0.1",
        ),
        ({"error_budgets": "tenth"}, r"--error-budgets: .*'tenth'"),
        ({"error_metric": "l1"}, r"--error-metric: unknown value 'l1'; expected one of rel_l2, cosine"),
        ({"plugins": ["/nonexistent/plugin.py"]}, r"--plugin /nonexistent/plugin.py: ImportError"),
    ],
)
def test_bad_values_are_one_line_usage_errors(cli, match):
    with pytest.raises(UsageError, match=match) as info:
        build_spec(cli={"device": "cpu", **cli})
    assert "\n" not in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda_is_refused():
    with pytest.raises(UsageError, match=r"--device: CUDA is not available here"):
        build_spec(cli={"device": "cuda"})


def test_bf16_on_a_gpu_without_it_is_refused(monkeypatch):
    from harness import devices as spec_module

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert "no bfloat16 support" in spec_module.dtype_reason("bfloat16", "cuda")
    assert spec_module.dtype_reason("float16", "cuda") is None


def test_malformed_toml_names_file_and_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('variants = ["dense"]\nseq_lens = [256, 512\nbatch = 1\n')
    with pytest.raises(UsageError, match=r"bad\.toml: malformed TOML: .*line 3"):
        build_spec(toml_path=path, cli={"device": "cpu"})


def test_unknown_toml_key_is_suggested(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("seq_len = [256]\n")
    with pytest.raises(UsageError, match=r"unknown key 'seq_len'.*Did you mean 'seq_lens'"):
        build_spec(toml_path=path, cli={"device": "cpu"})


def test_toml_value_error_names_file_and_key(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('heads = "many"\n')
    with pytest.raises(UsageError, match=r"s\.toml: heads: expected an integer, got 'many'"):
        build_spec(toml_path=path, cli={"device": "cpu"})


def test_variant_config_for_unknown_variant(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text("[variant_config.dnse]\nbackend = 'sdpa'\n")
    with pytest.raises(UsageError, match=r"unknown variant 'dnse'.*Did you mean 'dense'"):
        build_spec(toml_path=path, cli={"device": "cpu"})


def test_a_binary_config_file_is_one_line_exit_2(tmp_path, capsys):
    from harness.commands import main

    path = tmp_path / "binary.toml"
    path.write_bytes(b"seq_lens = [1]\n\xd0\xff\x00")
    assert main(["sweep", "--config", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "not a TOML text file (byte 0xd0 at offset 15" in err and len(err.strip().splitlines()) == 1, err


def test_plugins_named_by_a_spec_file_are_not_imported_unless_the_user_names_them_or_trusts_it(tmp_path):
    marker = tmp_path / "imported"
    plugin = tmp_path / "someone_elses.py"
    plugin.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    path = tmp_path / "shared.toml"
    path.write_text(f'plugins = [{str(plugin)!r}]\nvariants = ["dense"]\n')
    with pytest.raises(
        UsageError,
        match=r"names plugins .*someone_elses.py: importing them runs their code; to allow it pass "
        r"--plugin .*someone_elses.py \(or --trust-config\)",
    ):
        build_spec(toml_path=path, cli={"device": "cpu"}, plan_only=True)
    assert not marker.exists()  # refused before anything ran
    assert build_spec(toml_path=path, cli={"device": "cpu", "plugins": [str(plugin)]}, plan_only=True).plugins
    assert marker.exists()
    other_marker, other = tmp_path / "other_imported", tmp_path / "another.py"
    other.write_text(f"open({str(other_marker)!r}, 'w').write('ran')\n")
    path.write_text(f'plugins = [{str(other)!r}]\nvariants = ["dense"]\n')
    build_spec(toml_path=path, cli={"device": "cpu"}, plan_only=True, trust_config=True)
    assert other_marker.exists()  # trusted: imported


def test_no_cell_limit_reads_back_as_no_limit(tmp_path):
    spec = build_spec(cli={"device": "cpu", "variants": "dense", "cell_timeout_s": "0"}, plan_only=True)
    assert spec.cell_timeout_s is None
    path = tmp_path / "spec.toml"
    path.write_text(spec_to_toml(spec))
    assert build_spec(toml_path=path, plan_only=True).cell_timeout_s is None  # not the default 120 s


def test_an_unknown_key_from_python_is_refused_not_ignored():
    with pytest.raises(UsageError, match=r"cli: unknown key 'timeout'; known keys: .*cell_timeout_s"):
        build_spec(cli={"device": "cpu", "timeout": "0"}, plan_only=True)


def test_renamed_keys_are_read_under_their_new_names_with_one_note(tmp_path, capsys):
    from harness.spec import build_spec

    path = tmp_path / "old.toml"
    path.write_text('causal = [true]\npadding = [0.0]\nscope = ["layer"]\n')
    spec = build_spec(toml_path=path)
    assert (spec.causals, spec.paddings, spec.scopes) == ((True,), (0.0,), ("layer",))
    [note] = capsys.readouterr().err.strip().splitlines()
    assert "'causal' as 'causals'" in note and "'scope' as 'scopes'" in note and str(path) in note
    path.write_text("causal = [true]\ncausals = [false]\n")
    with pytest.raises(UsageError, match="both 'causal' and 'causals' are given"):
        build_spec(toml_path=path)


@pytest.mark.parametrize("given", ["none", "None", ""])
def test_error_budgets_none_turns_the_search_off_as_the_help_says(given):
    assert build_spec(cli={"device": "cpu", "error_budgets": given}).error_budgets == ()
