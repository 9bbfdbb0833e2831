"""Registry behaviour: register, build, list, get, plugins, and every user-facing error."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import variants
from tests.helpers.load import load_scaled
from variants import (
    AttentionVariant,
    Capabilities,
    NotSupportedError,
    VariantConfig,
    _registry,
    build_variant,
    get_variant,
    list_variants,
    register_variant,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def scratch_registry(monkeypatch):
    """Register test variants into a copy of the registry that is thrown away afterwards."""
    list_variants()  # load built-ins first so the copy has them
    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))
    return _registry._REGISTRY


@dataclass(frozen=True, kw_only=True)
class ScaledConfig(VariantConfig):
    factor: float = 1.0  # multiplies the output

    def validate(self) -> None:
        if self.factor <= 0:
            raise ValueError(f"factor must be > 0, got {self.factor}")


def _define_scaled(name: str = "scaled_test"):
    @register_variant(name, config=ScaledConfig)
    class ScaledTest(AttentionVariant):
        """Dense attention times a factor (a test variant)."""

        def forward(self, q, k, v, *, causal=False, kv_mask=None):
            return (
                variants.reference_attention(q, k, v, causal=causal, kv_mask=kv_mask, dtype=q.dtype)
                * self.config.factor
            )

    return ScaledTest


def test_builtins_are_listed_and_sorted():
    names = list_variants()
    assert "dense" in names
    assert names == sorted(names)


def test_glob_patterns_filter_names(scratch_registry):
    _define_scaled("scaled_a")
    _define_scaled("scaled_b")
    assert list_variants("scaled_*") == ["scaled_a", "scaled_b"]
    assert list_variants("scaled_b") == ["scaled_b"]
    assert list_variants("nothing_*") == []


def test_a_minimal_variant_needs_only_config_and_forward(scratch_registry):
    cls = _define_scaled()
    attn = build_variant("scaled_test", factor=2.0)
    assert isinstance(attn, cls)
    assert attn.config == ScaledConfig(factor=2.0)
    spec = get_variant("scaled_test")
    assert spec.cls is cls and spec.config is ScaledConfig
    assert spec.description == "Dense attention times a factor (a test variant)."
    assert [f.name for f in spec.fields] == ["factor"]
    assert spec.capabilities == Capabilities()  # defaults: approximate, no GQA, everything else supported
    q = torch.randn(1, 2, 5, 4)
    assert attn(q, q, q).shape == q.shape
    assert attn.flops(1, 2, 5, 5, 4, False) == 4 * 2 * 5 * 5 * 4


def test_a_variant_without_a_config_gets_an_empty_one(scratch_registry):
    @register_variant("no_config_test")
    class NoConfig(AttentionVariant):
        def forward(self, q, k, v, *, causal=False, kv_mask=None):
            return q

    attn = build_variant("no_config_test")
    assert attn.config.to_dict() == {}


def test_duplicate_name_is_refused(scratch_registry):
    _define_scaled("dup_test")

    with pytest.raises(ValueError, match="'dup_test' is already registered by .*ScaledTest; pick another name"):

        @register_variant("dup_test")
        class Other(AttentionVariant):
            pass


def test_reregistering_the_same_class_is_harmless(scratch_registry):
    _define_scaled("same_test")
    _define_scaled("same_test")  # a module imported twice (pytest -p and ATTNSUITE_PLUGINS)
    assert list_variants("same_test") == ["same_test"]


def test_class_must_subclass_the_base(scratch_registry):
    with pytest.raises(TypeError, match="needs a subclass of variants.AttentionVariant, got .*NotAVariant"):

        @register_variant("bad_base_test")
        class NotAVariant(torch.nn.Module):
            pass


def test_config_must_be_a_frozen_variant_config(scratch_registry):
    @dataclass
    class Loose:
        x: int = 1

    with pytest.raises(TypeError, match="must be a VariantConfig subclass"):
        register_variant("bad_config_test", config=Loose)

    class Undecorated(VariantConfig):  # fields without @dataclass would be silently ignored
        x: int = 1

    with pytest.raises(TypeError, match=r"must be decorated with @dataclass\(frozen=True, kw_only=True\)"):
        register_variant("bad_config_test", config=Undecorated)


def test_name_must_be_an_identifier():
    with pytest.raises(ValueError, match="must be a Python identifier like 'my_attn', got 'my-attn'"):
        register_variant("my-attn")


def test_backends_need_a_backend_field(scratch_registry):
    with pytest.raises(TypeError, match="declares backends .* has no 'backend' field"):

        @register_variant("backends_test", config=ScaledConfig)
        class WithBackends(AttentionVariant):
            backends = ("fast", "slow")


def test_unknown_variant_lists_names_and_suggests():
    with pytest.raises(ValueError, match=r"Unknown variant 'dnse'\. Available: .*dense.*Did you mean 'dense'\?"):
        build_variant("dnse")


def test_unknown_config_field_names_the_fields():
    with pytest.raises(
        TypeError,
        match=r"variant 'dense' has no config field 'backnd'; its fields are: backend, decode_backend\. Did you mean 'backend'\?",
    ):
        build_variant("dense", backnd="sdpa")


def test_invalid_config_value_names_field_and_value():
    with pytest.raises(
        ValueError,
        match=r"backend must be one of 'auto', 'sdpa', 'xformers', 'reference', got 'sdp'\. Did you mean 'sdpa'\?",
    ):
        build_variant("dense", backend="sdp")


def test_configs_are_frozen_and_keyword_only():
    config = variants.build_config("dense", backend="sdpa")
    with pytest.raises(Exception, match="cannot assign"):
        config.backend = "reference"  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional argument"):
        type(config)("sdpa")  # positional


def test_wrong_config_type_is_refused():
    with pytest.raises(TypeError, match="DenseAttention expects a DenseConfig, got ScaledConfig"):
        get_variant("dense").cls(ScaledConfig())


def test_forward_is_required(scratch_registry):
    @register_variant("no_forward_test")
    class NoForward(AttentionVariant):
        pass

    q = torch.randn(1, 1, 3, 2)
    with pytest.raises(NotImplementedError, match="must implement forward"):
        build_variant("no_forward_test")(q, q, q)


def test_declared_capabilities_refuse_with_every_reason(scratch_registry):
    @register_variant("limited_test")
    class Limited(AttentionVariant):
        capabilities = Capabilities(causal=False, kv_mask=False)

        def forward(self, q, k, v, *, causal=False, kv_mask=None):
            return q

    q = torch.randn(1, 1, 3, 2)
    mask = torch.ones(1, 3, dtype=torch.bool)
    with pytest.raises(NotSupportedError, match="does not support causal=True; does not support a key padding mask"):
        build_variant("limited_test")(q, q, q, causal=True, kv_mask=mask)


def test_plugin_file_registers_its_variants(tmp_path, scratch_registry):
    plugin = tmp_path / "my_plugin_attn.py"
    plugin.write_text(_PLUGIN_SOURCE.format(name="file_plugin_attn"))
    variants.load_plugin(str(plugin))
    assert "file_plugin_attn" in list_variants()


def test_missing_plugin_file_is_a_clear_error():
    with pytest.raises(ImportError, match="plugin file 'nowhere/attn.py' does not exist"):
        variants.load_plugin("nowhere/attn.py")


_PLUGIN_SOURCE = textwrap.dedent(
    """
    from variants import AttentionVariant, register_variant, reference_attention

    @register_variant("{name}")
    class PluginAttention(AttentionVariant):
        '''A plugin variant.'''

        def forward(self, q, k, v, *, causal=False, kv_mask=None):
            return reference_attention(q, k, v, causal=causal, kv_mask=kv_mask, dtype=q.dtype)
    """
)


def _run_python(code: str, env_extra: dict | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=load_scaled(120)
    )


@pytest.mark.slow
def test_importing_variants_prints_nothing_and_does_no_work():
    result = _run_python(
        "import sys, variants, harness; "
        "print(sorted(m for m in sys.modules if m.startswith(('xformers', 'triton', 'variants.dense'))))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.strip() == "[]"  # no xformers, no triton, not even the built-ins yet


@pytest.mark.slow
def test_listing_variants_on_cpu_prints_nothing():
    result = _run_python("import variants; variants.list_variants(); variants.build_variant('dense')")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""


@pytest.mark.slow
def test_environment_variable_plugins_and_broken_plugins(tmp_path):
    good = tmp_path / "good_attn.py"
    good.write_text(_PLUGIN_SOURCE.format(name="env_plugin_attn"))
    result = _run_python(
        "import warnings, variants; warnings.simplefilter('always'); print(variants.list_variants())",
        env_extra={"ATTNSUITE_PLUGINS": f"{good},module_that_does_not_exist"},
    )
    assert result.returncode == 0, result.stderr
    assert "env_plugin_attn" in result.stdout and "dense" in result.stdout
    assert "skipped plugin module_that_does_not_exist: ModuleNotFoundError" in result.stderr


@pytest.mark.slow
def test_entry_point_plugins_show_up_like_builtins(tmp_path):
    """A package installed with an attnsuite.variants entry point (a dist-info on sys.path)."""
    (tmp_path / "ep_pkg_attn.py").write_text(_PLUGIN_SOURCE.format(name="entry_point_attn"))
    dist = tmp_path / "ep_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-pkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[attnsuite.variants]\nentry_point_attn = ep_pkg_attn\n")
    result = _run_python(
        "import json, variants; s = variants.get_variant('entry_point_attn'); "
        "print(json.dumps([variants.list_variants(), s.module]))",
        env_extra={"PYTHONPATH": f"{tmp_path}:{REPO}"},
    )
    assert result.returncode == 0, result.stderr
    names, module = json.loads(result.stdout)
    assert "entry_point_attn" in names and "dense" in names
    assert module == "ep_pkg_attn"


@pytest.mark.slow
def test_contract_tests_pick_up_a_plugin_with_no_test_code(tmp_path):
    plugin = tmp_path / "leaky_attn.py"
    # A plugin that claims causal support but leaks the future: the contract suite must catch it.
    plugin.write_text(
        textwrap.dedent(
            """
            from variants import AttentionVariant, Capabilities, register_variant, reference_attention

            @register_variant("leaky_attn")
            class LeakyAttention(AttentionVariant):
                '''Ignores causal=True.'''

                capabilities = Capabilities(gqa=True)  # reference_attention groups K/V heads itself

                def forward(self, q, k, v, *, causal=False, kv_mask=None):
                    return reference_attention(q, k, v, kv_mask=kv_mask, dtype=q.dtype)
            """
        )
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--variant-plugin",
            str(plugin),
            "tests/variants/test_contract.py",
            "-k",
            "leaky_attn",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=load_scaled(300),
    )
    # The leak is caught by the causality checks, with H_kv = H and with grouped K/V heads, and by nothing else.
    for test in (
        "test_causal_leaks_nothing_from_the_future[leaky_attn]",
        "test_gqa_shape_causality_and_padding[kv2-leaky_attn]",
        "test_gqa_shape_causality_and_padding[kv1-leaky_attn]",
    ):
        assert f"FAILED tests/variants/test_contract.py::{test}" in result.stdout, result.stdout[-2000:]
    assert "3 failed" in result.stdout, result.stdout[-2000:]


def test_not_supported_error_takes_a_plain_message_or_a_variant_and_reasons():
    import pickle

    plain = NotSupportedError("causal is not implemented")
    assert plain.reasons == ["causal is not implemented"] and str(plain) == "causal is not implemented"
    full = NotSupportedError("my_attn", ["no causal", "no mask"])
    assert full.reasons == ["no causal", "no mask"] and str(full) == "my_attn cannot run this call: no causal; no mask"
    assert NotSupportedError("my_attn", "no causal").reasons == ["no causal"]
    again = pickle.loads(pickle.dumps(full))
    assert (again.variant, again.reasons) == ("my_attn", ["no causal", "no mask"])


@pytest.mark.parametrize("name", list_variants())
def test_a_quality_knob_names_an_int_field_whose_range_builds(name):
    spec = get_variant(name)
    knob = spec.quality_knob
    if knob is None:
        assert spec.capabilities.exact or name.startswith("t_") or spec.module.split(".")[0] != "variants", (
            f"{name} is approximate but declares no quality knob"
        )
        return
    for value in (knob.low, knob.high):
        built = build_variant(name, **{knob.field: value})
        assert getattr(built.config, knob.field) == value


def test_the_approximate_built_ins_declare_their_knobs():
    assert {n: get_variant(n).quality_knob.field for n in ("sliding_window", "linformer", "distilled")} == {
        "sliding_window": "window",
        "linformer": "k",
        "distilled": "features",
    }
    assert get_variant("dense").quality_knob is None and get_variant("chunked").quality_knob is None


def test_a_quality_knob_on_a_missing_or_non_int_field_is_refused():
    from dataclasses import dataclass

    from variants import QualityKnob

    @dataclass(frozen=True, kw_only=True)
    class Cfg(VariantConfig):
        scale: float = 1.0  # not an int

    class Knobbed(AttentionVariant):
        quality_knob = QualityKnob("scale", 1, 4)

    with pytest.raises(TypeError, match=r"declares quality_knob 'scale', which is not an int field of Cfg"):
        register_variant("t_knobbed_bad", config=Cfg)(Knobbed)
    with pytest.raises(ValueError, match=r"needs integers 1 <= low < high, got low=8, high=4"):
        QualityKnob("window", 8, 4)
