"""The hand-written decode kernels (variants._native) give the eager step's outputs and leave the same state, for every
variant whose decode_backend takes "native"; where a kernel cannot run (another dtype, no C compiler) the step runs in
torch and says why. Registry-wide: a variant that gains a native step is tested here with no new test code."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tests.helpers import REPO
from tests.variants.test_decode_step import B, CONTEXT, H, STEPS, D, takes_decode_backend
from variants import build_variant, get_variant, list_variants
from variants import _native
from variants._native import attend_one_query, native_library

NATIVE = [n for n in list_variants() if takes_decode_backend(n, "native")]
if isinstance(native_library(), str):  # no C compiler here: every native case would only test the fallback
    pytestmark = pytest.mark.skip(reason=f"the native kernels cannot be built here: {native_library()}")


def _decode(
    name: str, backend: str, *, kv_heads: int = H, padded: bool = False, dtype=torch.float32, move_at: int = -1
):
    """Outputs (B, H, STEPS, D), the final state and decode_kind() of a fresh build (seeded: both builds alike); before
    step `move_at`, every state tensor's storage is moved in place (`.data =` a copy: same objects, new addresses)."""
    torch.manual_seed(0)
    attn = build_variant(name, **{**get_variant(name).cls.small_config, "decode_backend": backend}).eval()
    q = torch.randn(B, H, CONTEXT + STEPS, D, dtype=dtype)
    k, v = (torch.randn(B, kv_heads, CONTEXT + STEPS, D, dtype=dtype) for _ in range(2))
    mask = torch.ones(B, CONTEXT, dtype=torch.bool)
    mask[0, -3:], mask[1, 2] = False, False  # right padding and a hole
    outs = []
    with torch.no_grad():
        attn(q[:, :, :8], k[:, :, :8], v[:, :, :8], causal=True)  # a learnable variant's parameters are made
        state = attn.init_state(k[:, :, :CONTEXT], v[:, :, :CONTEXT], kv_mask=mask if padded else None)
        for t in range(CONTEXT, CONTEXT + STEPS):
            if t - CONTEXT == move_at:
                for tensor in _tensors(state).values():
                    tensor.data = tensor.data.clone()
            out, state = attn.step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state)
            outs.append(out)
    return torch.cat(outs, dim=2), state, attn.decode_kind()


def _tensors(state) -> dict[str, torch.Tensor]:
    """A decode state's tensors by field name (a KV cache's live keys, values and mask; running sums; a ring's slots)."""
    if hasattr(state, "live_tensors"):  # a KV cache: its capacity past the live tokens is never written
        return {str(i): t for i, t in enumerate(state.live_tensors())}
    found = {}
    for name, value in vars(state).items():
        if isinstance(value, torch.Tensor):
            found[name] = value
        elif hasattr(value, "__dict__"):
            found.update({f"{name}.{k}": t for k, t in _tensors(value).items()})
    return found


@pytest.mark.parametrize("name", NATIVE)
@pytest.mark.parametrize("kv_heads,padded", [(H, False), (H, True), (2, False), (1, True)], ids=str)
def test_the_native_step_equals_the_eager_step(name, kv_heads, padded):
    eager, eager_state, eager_kind = _decode(name, "eager", kv_heads=kv_heads, padded=padded)
    native, native_state, kind = _decode(name, "native", kv_heads=kv_heads, padded=padded)
    assert (eager_kind, kind) == ("eager", "native"), f"{name}: the kernel did not run: {kind}"
    torch.testing.assert_close(native, eager, rtol=1e-5, atol=1e-5)
    eager_tensors, native_tensors = _tensors(eager_state), _tensors(native_state)
    assert eager_tensors.keys() == native_tensors.keys()
    for field, value in eager_tensors.items():  # what the step keeps for the next one, updated alike
        torch.testing.assert_close(native_tensors[field], value, rtol=1e-5, atol=1e-5, msg=f"{name}: state {field}")


@pytest.mark.parametrize("name", NATIVE)
def test_a_state_moved_in_place_is_read_at_its_new_address(name):
    """A kernel that kept a state's addresses between tokens reads them again once its storage moves (a KV cache
    hands out new views every step, so only the other states keep addresses)."""
    eager, eager_state, _ = _decode(name, "eager", move_at=2)
    native, native_state, kind = _decode(name, "native", move_at=2)
    assert kind == "native"
    torch.testing.assert_close(native, eager, rtol=1e-5, atol=1e-5)
    for field, value in _tensors(eager_state).items():  # updated where the state now lives
        torch.testing.assert_close(_tensors(native_state)[field], value, rtol=1e-5, atol=1e-5, msg=f"state {field}")


@pytest.mark.parametrize("name", NATIVE)
def test_auto_runs_the_kernel_on_cpu_in_float32(name):
    *_, kind = _decode(name, "auto")
    assert kind == "native"


@pytest.mark.parametrize("name", NATIVE)
def test_another_dtype_steps_in_torch_and_says_why(name):
    *_, kind = _decode(name, "native", dtype=torch.float64)
    assert kind == "eager (not native: needs float32, got torch.float64)", kind


def test_without_a_compiler_the_step_says_why(no_c_compiler):
    *_, kind = _decode(NATIVE[0], "native")
    assert kind == "eager (not native: no C compiler: 'no-such-compiler-attnsuite' is not on PATH (set CC to one))"


def test_a_build_is_reused_from_the_cache_and_rebuilt_for_other_flags(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = _native._built("cc")
    assert first.parent == tmp_path / "attnsuite" / "native" and first.exists()
    stamp = first.stat().st_mtime_ns
    assert _native._built("cc") == first and first.stat().st_mtime_ns == stamp  # not compiled again
    monkeypatch.setattr(_native, "FLAGS", _native.FLAGS + ("-DATTNSUITE_TEST",))
    assert _native._built("cc") != first


def test_loading_the_kernels_leaves_subnormals_alone():
    """A library linked with -ffast-math would set flush-to-zero for the whole process when loaded (gcc's crtfastmath):
    every later torch operation would read subnormals as 0. A fresh process, so no earlier load hides it."""
    script = (
        "import torch; from variants._native import native_library; assert not isinstance(native_library(), str); "
        "print(float(torch.tensor([1e-39]) * 1.0))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == pytest.approx(1e-39, rel=1e-3, abs=0)  # flushed: 0.0


def test_one_query_on_hand_made_inputs():
    """Two keys with scores 0 and log 3 (weights 1/4, 3/4), the second masked in batch 1; a strided (cache-like)
    layout and GQA (two query heads on one K/V head)."""
    D = 4
    q = torch.zeros(2, 2, 1, D)
    q[:, :, 0, 0] = 2.0 * torch.log(torch.tensor(3.0))  # q.k / sqrt(D) = log 3 at the second key
    cache = torch.zeros(2, 1, 8, D)  # capacity 8, two keys live
    cache[:, :, 1, 0] = 1.0
    values = torch.zeros(2, 1, 8, D)
    values[:, :, 0], values[:, :, 1] = torch.tensor([4.0, 0, 0, 0]), torch.tensor([0, 8.0, 0, 0])
    keep = torch.tensor([[True, True], [True, False]])
    with torch.no_grad():
        out = attend_one_query(q, cache[:, :, :2], values[:, :, :2], keep)
    expected = torch.tensor([[1.0, 6.0, 0, 0], [4.0, 0, 0, 0]])[:, None, None].expand(2, 2, 1, D)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize(
    "change,why",
    [
        (lambda q, k, v: (q.double(), k.double(), v.double()), "needs float32, got torch.float64"),
        (lambda q, k, v: (q.expand(-1, -1, 2, -1), k, v), "takes one query per head, got 2"),
        (lambda q, k, v: (q, k.transpose(-1, -2), v), "needs a contiguous last dimension"),
        (lambda q, k, v: (q.requires_grad_(), k, v), "has no backward: decode under torch.no_grad()"),
        (
            lambda q, k, v: (q, k[..., :4], v[..., :4]),
            "the shapes q (1, 2, 1, 8), k (1, 2, 8, 4), v (1, 2, 8, 4) do not fit one another",
        ),
    ],
    ids=["float64", "two-queries", "strided-rows", "grad", "head-dims"],
)
def test_one_query_says_why_it_cannot_run(change, why):
    q, k, v = change(torch.randn(1, 2, 1, 8), torch.randn(1, 2, 8, 8), torch.randn(1, 2, 8, 8))
    assert attend_one_query(q, k, v, None) == why
