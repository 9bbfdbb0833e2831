"""`python -m harness list` and `env`, and the CLI's usage-error convention (one line, exit 2)."""

import json
import subprocess
import sys

import pytest

from harness.commands import main
from tests.helpers import REPO
from tests.helpers.load import load_scaled


def test_list_shows_every_variant_with_backend_availability(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "dense: Exact softmax attention" in out
    assert "backend sdpa on cpu: forward: yes, train: yes" in out
    assert "backend xformers on cpu: forward: no (needs a CUDA device" in out
    assert "config: backend='auto'" in out
    # every flag Capabilities declares and the variant sets, in declaration order (causal_offset: generate() works;
    # softcap, sink_logits: Gemma 2 and gpt-oss features)
    assert (
        "  capabilities: exact, causal, causal_offset, kv_mask, backward, gqa, decode, softcap, sink_logits, quantized_kv; "
        "devices: cpu" in out
    )
    linformer = out[out.index("linformer:") :]
    assert "causal_offset" not in linformer[: linformer.index("devices:")]


def test_list_json_has_capabilities_and_config(capsys):
    assert main(["list", "dense", "--json"]) == 0
    (dense,) = json.loads(capsys.readouterr().out)
    assert dense["capabilities"]["exact"] is True
    assert dense["config"] == {
        "backend": {"type": "str", "default": "auto"},
        "decode_backend": {"type": "str", "default": "auto"},
    }
    assert dense["backends"]["reference"] == {"forward": "available", "train": "available"}


def test_list_with_a_plugin_file(tmp_path, capsys):
    plugin = tmp_path / "cli_plugin_attn.py"
    plugin.write_text(
        "from variants import AttentionVariant, register_variant\n"
        "@register_variant('cli_plugin_attn')\n"
        "class CliPlugin(AttentionVariant):\n"
        "    '''Returns v.'''\n"
        "    def forward(self, q, k, v, *, causal=False, kv_mask=None):\n"
        "        return v\n"
    )
    assert main(["list", "cli_plugin_*", "--plugin", str(plugin)]) == 0
    assert "cli_plugin_attn: Returns v." in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["list", "nope*"], "no variant matches 'nope*'; available: "),
        (
            ["list", "--plugin", "missing_file.py"],
            "--plugin missing_file.py: ImportError: plugin file 'missing_file.py' does not exist",
        ),
        (["bogus"], "invalid choice: 'bogus'"),
        (["list", "--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["list", "--device", "tpu"], "--device: device must be 'cpu', 'cuda' or 'cuda:<index>', got 'tpu'"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_env_reports_torch_and_threads(capsys):
    assert main(["env", "--json"]) == 0
    env = json.loads(capsys.readouterr().out)
    import torch

    assert env["torch"] == torch.__version__
    assert env["torch_threads"] == torch.get_num_threads()
    assert env["cuda_available"] == torch.cuda.is_available()
    assert "xformers" in env["packages"]


def test_module_entry_point_runs_in_a_fresh_process():
    result = subprocess.run(
        [sys.executable, "-m", "harness", "--help"], capture_output=True, text=True, cwd=REPO, timeout=load_scaled(60)
    )
    assert result.returncode == 0
    assert "list" in result.stdout and "env" in result.stdout


@pytest.mark.slow
def test_a_command_imports_only_its_own_module():
    code = (
        "import sys; from harness.commands import main; main(['list', 'dense']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pandas', 'matplotlib', 'xformers', 'triton') "
        "or m.split('.')[:2] in (['harness', 'report'], ['harness', 'runner'], ['harness', 'spec'])))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=load_scaled(120)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_ctrl_c_during_a_sweep_says_interrupted_once_with_how_to_continue(tmp_path, monkeypatch, capsys):
    from harness.runner import sweep_into

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_into, "_run_cells", interrupted)
    argv = ["sweep", "--variants", "dense", "--seq-lens", "64", "--out", str(tmp_path), "--run-id", "r", "--quiet"]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert err.count("interrupted") == 1 and "continue with" in err, err
