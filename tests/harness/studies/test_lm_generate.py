"""model-eval's generation columns on a tiny Llama: continuation agreement with dense, decode tokens/s, refusals."""

from __future__ import annotations

import json

import pytest
import torch

from harness.commands import main
from harness.models import hf_adapter, hf_model
from harness.report.render import Table
from harness.report.study_results import lm_eval_table, study_sections
from harness.studies import lm_eval, lm_generate
from tests.helpers.tiny_hf import save_tiny
from variants import AttentionVariant, Capabilities, build_variant, register_variant
from variants import _registry
from variants.reference import reference_attention

pytestmark = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)
T = 6  # tokens generated per prompt: enough for a planted difference to show, few enough to stay fast


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("llama"), "llama")


def _text() -> str:
    from harness.commands.model_eval import _read_text

    return _read_text(None)


def _greedy(folder, make_variant, prompt: list[int]) -> list[int]:
    """The T tokens transformers' own generate() continues `prompt` with, make_variant(i) in every layer."""
    model = hf_model.swap_layers(hf_model.load_pretrained(str(folder)), make_variant)
    ids = torch.tensor([prompt])
    out = model.generate(input_ids=ids, max_new_tokens=T, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt) :].tolist()


def test_dense_agrees_with_itself_and_a_one_token_window_by_hand(llama):
    rows, meta = lm_eval.run_lm_eval(
        str(llama),
        ["dense", "sliding_window"],
        [32],
        text=_text(),
        n_eval=1,
        n_calibration=0,
        steps=0,
        overrides={"sliding_window": {"window": 1}},
        generate_tokens=T,
        tokenizer="bytes",
    )
    dense, window = rows
    assert meta["generate_tokens"] == T
    assert dense["generation_status"] == "ok" and dense["continuation_agreement"] == 1.0
    assert dense["generated_tokens"] == T and dense["decode_tokens_per_s"] > 0
    stream, _ = hf_model.token_ids(str(llama), _text(), 128, tokenizer="bytes")
    (prompt,) = hf_model.token_windows(stream, 32, 1, calibration=False)
    expected = _greedy(llama, lambda i: build_variant("dense"), prompt)
    found = _greedy(llama, lambda i: build_variant("sliding_window", window=1), prompt)
    by_hand = sum(a == b for a, b in zip(found, expected)) / T
    assert by_hand < 1.0 and window["continuation_agreement"] == pytest.approx(by_hand)
    assert window["generation_status"] == "ok" and window["decode_tokens_per_s"] > 0
    # the own-state path: the same tokens, and the states' bytes by hand (2 layers, H_kv 2, D 16, float32)
    for row in rows:
        assert row["state_cache_agreement"] == 1.0 and row["state_decode_tokens_per_s"] > 0, row
    kv_cache = 2 * 2 * 2 * 64 * 16 * 4  # layers, k and v, H_kv, the capacity (twice the 32-token prompt), D, bytes
    ring = 2 * (2 * 2 * 1 * 16 * 4 + 8 + 1)  # layers x (k and v of one slot per K/V head, its position, its flag)
    assert (dense["decode_state_bytes"], window["decode_state_bytes"]) == (kv_cache, ring)


class TopLeftAttention(AttentionVariant):
    """Exact causal attention aligned top-left: N == M only, so it cannot decode against a KV cache."""

    capabilities = Capabilities(exact=True)

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return reference_attention(q, k, v, causal=causal, kv_mask=kv_mask, dtype=None)


@pytest.fixture
def top_left():
    register_variant("t_top_left")(TopLeftAttention)
    yield "t_top_left"
    _registry._REGISTRY.pop("t_top_left", None)


def test_a_variant_without_causal_offset_gets_unsupported_generation_never_a_number(llama, top_left, tmp_path):
    argv = [
        "model-eval",
        "--tokenizer",
        "bytes",
        "--model",
        str(llama),
        "--seq-lens",
        "16",
        "--variants",
        top_left,
        "--texts",
        "1",
    ]
    assert main([*argv, "--generate-tokens", str(T), "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "lm_eval.json").read_text())["rows"]
    assert row["status"] == "ok" and row["perplexity"] is not None  # its prefill is fine
    assert row["generation_status"] == "unsupported" and row["continuation_agreement"] is None
    assert row["decode_tokens_per_s"] is None and "Capabilities.causal_offset is False" in row["generation_reason"]
    md = (tmp_path / "lm_eval.md").read_text()
    assert "| unsupported |" in md and "causal_offset is False" in md
    (table,) = [b for b in study_sections(tmp_path) if isinstance(b, Table)]  # the run report's model-eval section
    assert table.headers[-5:] == [
        "continuation agreement",
        "decode tokens/s",
        "own-state tokens/s",
        "own state MiB",
        "note",
    ]


def test_no_generation_with_zero_tokens(llama):
    rows, meta = lm_eval.run_lm_eval(
        str(llama),
        ["dense"],
        [16],
        text=_text(),
        n_eval=1,
        n_calibration=0,
        steps=0,
        generate_tokens=0,
        tokenizer="bytes",
    )
    (row,) = rows
    assert meta["generate_tokens"] == 0 and row["generation_status"] is None and row["continuation_agreement"] is None
    assert "continuation agreement" not in lm_eval_table(rows).headers


def test_kl_is_the_default_budget_metric(llama):
    rows, meta = lm_eval.run_lm_eval(
        str(llama),
        ["sliding_window"],
        [32],
        text=_text(),
        n_eval=1,
        n_calibration=1,
        steps=0,
        budgets=(2.0,),
        tokenizer="bytes",
    )
    assert meta["error_metric"] == "kl" and rows[0]["tuning"]["metric"] == "KL(dense||variant)"


def test_a_kl_rounding_made_negative_is_shown_as_zero_and_stored_raw():
    row = {"variant": "chunked", "seq_len": 64, "status": "ok", "kl_mean": -8e-10, "perplexity": 2.0}
    rows = [row, {**row, "variant": "broken", "kl_mean": -2e-6}, {**row, "variant": "tiny", "kl_mean": 8e-10}]
    table = lm_eval_table(rows)
    kl = table.headers.index("KL(dense||variant)")
    assert [r[kl] for r in table.rows] == ["0", "-2.00e-06", "8.00e-10"]  # below the tolerance: not rounding, shown
    assert row["kl_mean"] == -8e-10


class NoStateAttention(AttentionVariant):
    """Exact attention with a query offset (so it generates on transformers' cache) but no decode state of its own."""

    capabilities = Capabilities(exact=True, causal_offset=True)

    def forward(self, q, k, v, *, causal=False, kv_mask=None):
        return reference_attention(q, k, v, causal=causal, kv_mask=kv_mask, dtype=None)


def test_a_variant_without_a_decode_state_generates_on_the_kv_cache_and_says_why_not_its_own(llama):
    register_variant("t_no_state")(NoStateAttention)
    try:
        rows, _ = lm_eval.run_lm_eval(
            str(llama), ["t_no_state"], [16], text=_text(), n_eval=1, n_calibration=0, steps=0,
            generate_tokens=T, tokenizer="bytes",
        )  # fmt: skip
    finally:
        _registry._REGISTRY.pop("t_no_state", None)
    (row,) = rows
    assert row["generation_status"] == "ok" and row["continuation_agreement"] == 1.0
    assert row["state_decode_tokens_per_s"] is None and row["decode_state_bytes"] is None
    assert row["state_generation_reason"] == "t_no_state has no decode state (Capabilities.decode is False)"
    assert "state path: t_no_state has no decode state" in lm_generate.generation_text(row)
