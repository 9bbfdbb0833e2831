"""Spec precedence by value: embedded defaults < a hand-written TOML < flags, key by key, with where each value came from;
a flag left unset (None) never hides the file's value; the device a flag names wins over the file's; variant_config
under an entry's own fields; and which guarded keys a file may set on its own (harness.executors.guarded_keys)."""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.executors import guarded_keys, option_knobs
from harness.spec.build import build_spec

TOML = """
variants = ["dense"]
seq_lens = [64, 128]
heads = 6
batch = 3
kv_heads = [3]
causals = [true]
error_budgets = [0.2]
repeats = 7
seed = 11
"""


def spec_from(tmp_path, text=TOML, **cli):
    path = tmp_path / "mine.toml"
    path.write_text(text)
    return build_spec(toml_path=path, cli={"device": "cpu", **cli}), str(path)


def test_each_key_takes_the_flag_over_the_file_over_the_default(tmp_path):
    spec, path = spec_from(tmp_path, heads="4", kv_heads="2,1", seed="5", error_rows="32")
    want = {  # key: (value, where it came from)
        "heads": (4, "--heads"),
        "kv_heads": ((2, 1), "--kv-heads"),
        "seed": (5, "--seed"),
        "error_rows": (32, "--error-rows"),
        "seq_lens": ((64, 128), f"{path}: seq_lens"),
        "batch": (3, f"{path}: batch"),
        "causals": ((True,), f"{path}: causals"),
        "error_budgets": ((0.2,), f"{path}: error_budgets"),
        "repeats": (7, f"{path}: repeats"),
        "time_budget_s": (0.25, "default spec: time_budget_s"),  # harness/spec/cpu.toml
        "calibration_steps": (50, "default spec: calibration_steps"),
        "modes": (("forward",), "default spec: modes"),
    }
    got = {key: (getattr(spec, key), spec.sources[key]) for key in want}
    assert got == want


def test_a_flag_left_unset_keeps_the_files_value(tmp_path):
    spec, path = spec_from(tmp_path, heads=None, seed=None, repeats="2")
    assert (spec.heads, spec.seed, spec.repeats) == (6, 11, 2)
    assert (spec.sources["heads"], spec.sources["repeats"]) == (f"{path}: heads", "--repeats")


def test_an_old_key_name_in_the_file_reads_under_its_new_name_and_the_flag_still_wins(tmp_path, capsys):
    spec, path = spec_from(tmp_path, TOML.replace("causals = [true]", "causal = [true]"))
    assert spec.causals == (True,) and spec.sources["causals"] == f"{path}: causals"
    spec, _ = spec_from(tmp_path, TOML.replace("causals = [true]", "causal = [true]"), causals="false")
    assert spec.causals == (False,) and spec.sources["causals"] == "--causals"
    assert "read the older key names 'causal' as 'causals'" in capsys.readouterr().err


def test_the_device_flag_wins_over_the_files_and_the_file_over_auto(tmp_path):
    spec, path = spec_from(tmp_path, TOML + 'device = "cuda:3"\n', device="cpu")  # no GPU needed: the flag wins
    assert (spec.device, spec.device_was_auto) == ("cpu", False)
    path = tmp_path / "cpu.toml"
    path.write_text(TOML + 'device = "cpu"\n')
    spec = build_spec(toml_path=path, cli={})
    assert (spec.device, spec.device_was_auto) == ("cpu", False)
    assert build_spec(toml={"variants": ["dense"]}, cli={}).device_was_auto is True


def test_a_kv_heads_the_user_gives_must_divide_heads_but_the_defaults_follow_them(tmp_path):
    with pytest.raises(UsageError, match=r"mine.toml: kv_heads: 3 key/value heads do not divide --heads = 4"):
        spec_from(tmp_path, heads="4")  # the file's kv_heads 3 under the flag's heads 4
    spec, _ = spec_from(tmp_path, TOML.replace("kv_heads = [3]\n", ""), heads="4")
    assert spec.kv_heads == ()  # none given: every cell's K/V heads are its heads


def test_variant_config_sits_under_an_entrys_own_fields(tmp_path):
    text = TOML.replace('variants = ["dense"]', 'variants = ["sliding_window", "sliding_window:window=48"]')
    spec, _ = spec_from(tmp_path, text + "[variant_config.sliding_window]\nwindow = 24\nsinks = 4\n")
    assert [(e.config["window"], e.config["sinks"]) for e in spec.variants] == [(24, 4), (48, 4)]
    spec, _ = spec_from(tmp_path, text, variants="sliding_window:window=40")  # the flag's list replaces the file's
    assert [e.config["window"] for e in spec.variants] == [40]


def trusted_spec(tmp_path, text, **cli):
    path = tmp_path / "someone_elses.toml"
    path.write_text('variants = ["dense"]\n' + text)
    flags = {key: k.flag or key for key, (k, _) in option_knobs().items()}
    return build_spec(toml_path=path, cli={"device": "cpu", **cli}, executor_flags=flags, guarded=guarded_keys())


def test_a_file_may_set_harmless_executor_values_on_its_own():
    guarded = guarded_keys()
    assert guarded["executor"] == ("local", "subprocess") and guarded["ray_address"] == (None,)


@pytest.mark.parametrize(
    "text, cli",
    [
        ('executor = "subprocess"\n', {}),  # not remote
        ('executor = "local"\nslurm_cluster = "slurm"\n', {}),  # a slurm option at its default
        ('executor = "ray"\n', {"executor": "ray"}),  # the user's own flag asks for the same
        ('executor = "slurm"\nslurm_partition = "gpu"\n', {"executor": "slurm", "slurm_partition": "cpu"}),
    ],
)
def test_a_file_value_the_user_also_gives_or_that_is_harmless_is_taken(tmp_path, text, cli):
    spec = trusted_spec(tmp_path, text, **cli)
    assert spec.executor == cli.get("executor", text.split('"')[1])
    if "slurm_partition" in cli:
        assert spec.executor_options["slurm_partition"] == "cpu"  # the flag's value, not the file's


@pytest.mark.parametrize(
    "text, cli, named",
    [
        ('executor = "ray"\nray_address = "ray://x:1"\n', {"executor": "ray"}, "ray_address = 'ray://x:1'"),
        ('slurm_partition = "gpu"\n', {"executor": "local"}, "slurm_partition = 'gpu'"),
    ],
)
def test_a_guarded_key_the_flags_do_not_give_is_refused_even_when_others_are(tmp_path, text, cli, named):
    with pytest.raises(UsageError, match="sets " + named.replace("(", r"\(")) as error:
        trusted_spec(tmp_path, text, **cli)
    assert "executor = " not in str(error.value)  # the executor the flag gave is not held against it


def test_a_plugin_the_file_names_is_taken_when_the_flag_names_the_same_file_another_way(tmp_path, monkeypatch):
    (tmp_path / "mine_plugin.py").write_text("VALUE = 1\n")
    monkeypatch.chdir(tmp_path)
    spec = trusted_spec(tmp_path, 'plugins = ["./mine_plugin.py"]\n', plugins=[str(tmp_path / "mine_plugin.py")])
    assert spec.plugins
    with pytest.raises(UsageError, match=r"names plugins \./mine_plugin\.py.*--plugin \./mine_plugin\.py"):
        trusted_spec(tmp_path, 'plugins = ["./mine_plugin.py"]\n')
