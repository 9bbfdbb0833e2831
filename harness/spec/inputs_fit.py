"""Before any cell runs: an input distribution that can make none of the sweep's shapes is a usage error.

Checked by harness.executors.resolve_spec for the executors whose cells run on this machine (local, subprocess); a
remote executor's workers judge their own cells (the model folder or extra may be theirs only).

An entry's shapes are the spec's (batch, heads, kv heads, head dims, lengths) with its params; the generator's own
checks judge them (harness.inputs: availability, max_seq_len, shape_check; the `model` input reads only its folder's
config.json, `real` MiniLM's fixed config). An entry that fits some shapes and not others is measured: the cells it
cannot make become `unsupported` rows, each with its reason.
"""

from __future__ import annotations

import itertools

from harness.inputs import get_inputs, parse_inputs
from harness.spec.convert import SpecError
from harness.spec.sweep_spec import SweepSpec


def check_inputs_fit(spec: SweepSpec) -> None:
    """SpecError naming the entry, the first shape it refuses and the reason (which names the flags to use) when an
    entry of spec.inputs can make none of the spec's shapes."""
    for entry in spec.inputs:
        name, params = parse_inputs(entry)
        generator = get_inputs(name)
        shapes = itertools.product(spec.kv_heads or (spec.heads,), spec.head_dims, sorted(spec.seq_lens))
        reasons = []
        for H_kv, D, N in shapes:
            reason = generator.unsupported_reason(N, N, B=spec.batch, H=spec.heads, D=D, H_kv=H_kv, params=params)
            if reason is None:
                break  # this shape fits: the entry is measured, any other shape it refuses is an `unsupported` row
            reasons.append((reason, H_kv, D, N))
        else:
            reason, H_kv, D, N = reasons[0]
            raise SpecError(
                f"{spec.where('inputs')}: {entry!r} can make none of this sweep's {len(reasons)} shapes (the first: "
                f"--heads {spec.heads} --kv-heads {H_kv} --head-dims {D} --seq-lens {N}): {reason}"
            )
