"""A decode cell: the state for an N-token context built untimed, then `decode_steps` tokens generated one at a time.

Inputs hold N + S positions (S = decode_steps): the first N are the context, token t of the
generation is query/key/value N + t, so each step appends its own k_t, v_t. Each timed repeat
starts from a freshly built state (init_state outside the timed region) and generates all S
tokens; latency_s is seconds per generated token. state_bytes is the state right after the
context (variants.state_bytes). Accuracy: the S outputs of the first (untimed) generation against
exact causal attention over the whole prefix (rows N .. N+S-1; the variant's own pattern with
accuracy_reference "pattern"). Decoding is inference: forward only, under no_grad, always causal.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor

from harness.measure.accuracy import nonfinite, output_errors
from harness.measure.contention import contention_fields
from harness.measure.flops import attention_flops, flops_fields
from harness.measure.kernel import memory_and_kernel
from harness.measure.settings import MeasureSettings
from harness.measure.stages import StageRecorder, stage
from harness.measure.timer import StepTimer, Stopwatch
from harness.schema import Cell


def decode_inputs_extra(cell: Cell, settings: MeasureSettings) -> int:
    """Positions a cell's inputs need beyond N: the generated tokens of a decode cell, else none."""
    return settings.decode_steps if cell.phase == "decode" else 0


def full_mask(kv_mask: Tensor | None, steps: int) -> Tensor | None:
    """The context's kv_mask (B, N) extended by the generated tokens, all real: (B, N + steps)."""
    if kv_mask is None:
        return None
    return torch.cat([kv_mask, kv_mask.new_ones(kv_mask.shape[0], steps)], dim=1)


def measure_decode(
    attn: Any,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    kv_mask: Tensor | None,
    cell: Cell,
    settings: MeasureSettings,
    device: torch.device,
    recorder: StageRecorder,
) -> dict[str, Any]:
    """The measured fields of a decode cell (see module doc). q: (B, H, N + S, D); k, v: (B, H_kv, N + S, D).

    Each stage's fields go to `recorder` as it finishes, so a later failure leaves them in the row.
    """
    N, S = cell.seq_len, settings.decode_steps
    context_k, context_v = k[:, :, :N], v[:, :, :N]
    tokens = [
        (q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1]) for t in range(N, N + S)
    ]  # views, made untimed

    def fresh_state() -> Any:
        with torch.no_grad():
            return attn.init_state(context_k, context_v, kv_mask=kv_mask)

    def generate(state: Any) -> list[Tensor]:
        outs = []
        with torch.no_grad():
            for q_t, k_t, v_t in tokens:
                out_t, state = attn.step(q_t, k_t, v_t, state)
                outs.append(out_t)
        return outs

    from variants import live_state_bytes

    with stage("init_state"):
        with Stopwatch(device) as watch:
            state = fresh_state()
        recorder.record(
            {
                "setup_s": watch.seconds,
                "state_bytes": int(attn.state_bytes(state)),
                "state_live_bytes": int(live_state_bytes(state)),
            }
        )
    with stage("accuracy"):
        with Stopwatch(device) as watch:
            outs = generate(state)
        first_call_s = watch.seconds
        out = torch.cat(outs, dim=2)  # (B, H, S, D)
        bad = nonfinite(out)
        if bad:
            return recorder.outcome("nonfinite", bad)
        recorder.record(_accuracy(attn, q, k, v, out, kv_mask, N, S, settings.accuracy_reference))
        del outs, out, state
    with stage("memory"):

        def ready() -> Callable[[], list[Tensor]]:
            state = fresh_state()  # built before the memory is counted, as before each timed generation
            return lambda: generate(state)

        recorder.record(memory_and_kernel(ready, device))
    with stage("timing"):
        timed = StepTimer(device).measure(
            generate,
            setup=fresh_state,
            budget_s=settings.time_budget_s,
            repeats=settings.repeats,
            first_call_s=first_call_s,
        )
    latency_fields = timed.latency_fields(per=S)  # per generated token
    latency = latency_fields["latency_s"]
    # per token
    per_step = [attention_flops(attn, cell, backend=None, N=1, M=N + t + 1, causal=False) for t in range(S)]
    executed, useful = (sum(step[i] for step in per_step) // S for i in (0, 1))
    return recorder.outcome(
        "ok",
        **latency_fields,
        **contention_fields(timed.blocks, per=S),
        **flops_fields(executed, latency, training=False, useful_attention_flops=useful),
    )


def _accuracy(
    attn: Any, q: Tensor, k: Tensor, v: Tensor, out: Tensor, kv_mask: Tensor | None, N: int, S: int, reference: str
) -> dict[str, Any]:
    from variants import reference_attention

    rows = torch.arange(N, N + S, device=q.device)
    pattern = attn.pattern if reference == "pattern" else None
    with torch.no_grad():
        # (B, H, S, D)
        ref = reference_attention(
            q.double(), k.double(), v.double(), causal=True, kv_mask=full_mask(kv_mask, S), pattern=pattern, rows=rows
        )
    return output_errors(out.double(), ref)
