"""A decode cell: the state for an N-token context built untimed, then `decode_steps` tokens generated one at a time.

Inputs hold N + S positions (S = decode_steps): the first N are the context, token t of the
generation is query/key/value N + t, so each step appends its own k_t, v_t. Each timed repeat
starts from a freshly built state (init_state outside the timed region) and generates all S
tokens; latency_s is seconds per generated token. state_bytes is the state right after the
context (variants.state_bytes). Accuracy: the S outputs of the first (untimed) generation against
exact causal attention over the whole prefix (rows N .. N+S-1; the variant's own pattern with
accuracy_reference "pattern"), and the last timed generation's against the same reference (a state that
decays between generations is an error row). Decoding is inference: forward only, under no_grad, always causal.
With a kv_dtype the state's keys and values are stored quantized between steps and the tokens' K/V reach the variant
as the cache gives them back (harness.measure.kv_quant); state_bytes then counts the stored values and scales, and the
reference is computed from the unquantized K/V, so the error shows what quantization costs.
The stages are harness.measure.phase's; this module supplies the decode cell's part of them (harness.measure.kind).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor

from harness.measure.flops import Flops, flops_fields
from harness.measure.kind import Checked, Phase, Prepared, TimedStep
from harness.measure.kv_quant import loaded_state, quantization_errors, stored_state
from harness.measure.reference import nonfinite, output_errors
from harness.measure.settings import MeasureSettings
from harness.measure.timer import Stopwatch
from harness.schema import Cell
from variants import count_flops, live_state_bytes, reference_attention
from variants._quantize import round_trip


def full_mask(kv_mask: Tensor | None, steps: int) -> Tensor | None:
    """The context's kv_mask (B, N) extended by the generated tokens, all real: (B, N + steps)."""
    if kv_mask is None:
        return None
    return torch.cat([kv_mask, kv_mask.new_ones(kv_mask.shape[0], steps)], dim=1)


class DecodePhase(Phase):
    """The decode cell's part of the measurement path (harness.measure.kind). q: (B, H, N + S, D); k, v:
    (B, H_kv, N + S, D); the first N positions are the context."""

    prepare_stage = "init_state"

    def __init__(
        self,
        attn: Any,
        cell: Cell,
        qkv: tuple[Tensor, Tensor, Tensor],
        kv_mask: Tensor | None,
        settings: MeasureSettings,
        device: torch.device,
    ):
        self.attn, self.cell, self.settings, self.device = attn, cell, settings, device
        self.q, self.k, self.v = qkv
        self.kv_mask = kv_mask
        N, S = self.N, self.S = cell.seq_len, settings.decode_steps
        q, k, v = qkv
        self.kv_dtype = cell.kv_dtype
        k, v = (round_trip(t, cell.kv_dtype) for t in (k, v))  # as the cache gives them back (untimed; "none": k, v)
        self.context_kv = k[:, :, :N], v[:, :, :N]
        # each token's q_t, k_t, v_t as views, made untimed
        self.tokens = [(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1]) for t in range(N, N + S)]
        self.reference: Tensor | None = None
        self._prepared: Any = None  # the state prepare built: the checked generation starts from it

    def fresh_state(self) -> Any:
        """The state after the context, built from scratch (outside any timed region)."""
        with torch.no_grad():
            return stored_state(self.attn.init_state(*self.context_kv, kv_mask=self.kv_mask), self.kv_dtype)

    def generate(self, state: Any) -> list[Tensor]:
        """The S tokens generated one at a time from `state`: each step's output (B, H, 1, D)."""
        outs, quantized = [], self.kv_dtype != "none"
        with torch.no_grad():
            for q_t, k_t, v_t in self.tokens:
                if quantized:  # the stored cache read, the step, the cache stored again (harness.measure.kv_quant)
                    out_t, state = self.attn.step(q_t, k_t, v_t, loaded_state(state))
                    state = stored_state(state, self.kv_dtype)
                else:
                    out_t, state = self.attn.step(q_t, k_t, v_t, state)
                outs.append(out_t)
        return outs

    def prepare(self) -> Prepared:
        with Stopwatch(self.device) as watch:
            with torch.no_grad():  # one step on a throwaway state: what it builds for the step's shapes (a compiled
                q_t, k_t, v_t = self.tokens[0]  # kernel for the query's heads under GQA) is set-up, never timed
                self.attn.step(q_t, k_t, v_t, loaded_state(self.fresh_state()))
            state = self._prepared = self.fresh_state()
        N = self.N
        errors = quantization_errors(self.k[:, :, :N], self.v[:, :, :N], self.kv_dtype)  # the context's K and V
        sizes = int(self.attn.state_bytes(state)), int(live_state_bytes(state))
        return Prepared(watch.seconds, *sizes, decode_step=self.attn.decode_kind(), **errors)

    def check(self) -> Checked:
        state, self._prepared = self._prepared, None
        with Stopwatch(self.device) as watch:
            outs = self.generate(state)
        del state
        out = torch.cat(outs, dim=2)  # (B, H, S, D)
        bad = nonfinite(out)
        if bad:
            return Checked({}, watch.seconds, bad)
        self.reference = self._reference()
        return Checked(output_errors(out.double(), self.reference), watch.seconds)

    def ready(self) -> Callable[[], list[Tensor]]:
        state = self.fresh_state()  # built before the memory is counted, as before each timed generation
        return lambda: self.generate(state)

    def timed_step(self) -> TimedStep:
        return TimedStep(self.generate, setup=self.fresh_state, per=self.S)  # latencies per generated token

    def score_timed(self, output: Any) -> tuple[dict[str, Any], str | None]:
        out = torch.cat(output, dim=2)  # the last timed generation, (B, H, S, D)
        bad = nonfinite(out)
        return ({}, bad) if bad else (output_errors(out.double(), self.reference), None)

    def flops(self, latency_s: float) -> Flops:
        """Per generated token, the mean over the S steps; step t follows the context and the t tokens before it.
        Executed: what the variant's step runs (decode_step_flops: a KV cache's forward over all N + t + 1 keys, a
        ring's window, running sums' one token); useful: the variant's forward of one query over the N + t + 1 keys."""
        N, S, c = self.N, self.S, self.cell
        B, H, D, H_kv = c.batch, c.heads, c.head_dim, c.kv_heads
        executed = sum(self.attn.decode_step_flops(B, H, N + t, D, H_kv=H_kv) for t in range(S))
        useful = sum(count_flops(self.attn, B, H, 1, N + t + 1, D, False, H_kv=H_kv) for t in range(S))
        return flops_fields(executed // S, latency_s, training=False, useful_attention_flops=useful // S)

    def _reference(self) -> Tensor:
        """Exact causal attention for rows N .. N + S - 1 over the whole prefix (the variant's own pattern under
        accuracy_reference "pattern"), (B, H, S, D) in float64."""
        N, S = self.N, self.S
        rows = torch.arange(N, N + S, device=self.q.device)
        pattern = self.attn.pattern if self.settings.accuracy_reference == "pattern" else None
        q64, k64, v64 = (t.double() for t in (self.q, self.k, self.v))
        with torch.no_grad():
            return reference_attention(
                q64, k64, v64, causal=True, kv_mask=full_mask(self.kv_mask, S), pattern=pattern, rows=rows
            )
