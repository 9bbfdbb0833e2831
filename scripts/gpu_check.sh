#!/usr/bin/env bash
# The whole GPU check in one call, about 8 minutes on an H200 (docs/gpu.md): the cuda-marked tests, then a trimmed
# sweep (scripts/gpu_check.toml; every registered variant with its CUDA backends, scripts/gpu_check_variants.py)
# under a wall-time guard that stops it cleanly, keeping every row already written. The causal query offset (N < M
# keys, a KV-cache step: tests/variants/test_contract_offset.py) is no sweep axis (cells plan M = N), so its CUDA
# path is checked by the cuda-marked tests, on every variant's CUDA backends.
#
#   OUT=/some/folder bash scripts/gpu_check.sh          # on the GPU machine, from anywhere
#   bash scripts/gpu_check.sh --dry-run                 # anywhere: the planned cells and the time limits, nothing run
#
# Writes to $OUT (default results/gpu-check), at most 5 files: gpu_check.log (all output), tests.log and tests.xml
# (pytest), rows.jsonl and run.tar.gz (the run folder, report included when the sweep finished in time). Environment:
# CHECK_WALL_S (default 480: the whole check), TESTS_WALL_S (default 150: the tests' share; 0 skips them),
# VARIANTS (default: from the registry; a rerun of the failing part names its entries), RUN_ID (default
# h200-check), DEVICE (default cuda; cpu runs the script's flow without a GPU, a smoke test of the script), and scripts/_gpu_env.sh's PYTHON, WHEELS (default .whl: xformers' wheel, say), SITE.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$SECONDS
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "error: unknown argument '$1'; expected nothing or --dry-run" >&2; exit 2 ;;
esac
CHECK_WALL_S=${CHECK_WALL_S:-480}
TESTS_WALL_S=${TESTS_WALL_S:-150}
PACK_S=30       # kept back at the end: packing the run folder, the summary
KILL_AFTER_S=20 # after the guard's SIGINT (KeyboardInterrupt: the sweep stops between rows), SIGKILL
RUN_ID=${RUN_ID:-h200-check}
OUT=${OUT:-results/gpu-check}
export PYTHONUNBUFFERED=1

source scripts/_gpu_env.sh
variants=${VARIANTS:-$("$PYTHON" scripts/gpu_check_variants.py)}
DEVICE=${DEVICE:-cuda}
sweep=("$PYTHON" -m harness sweep --config scripts/gpu_check.toml --variants "$variants" --device "$DEVICE" --quiet)

if [ "$DRY" = 1 ]; then
  "${sweep[@]}" --dry-run
  echo "limits: the whole check ${CHECK_WALL_S}s; cuda-marked tests up to ${TESTS_WALL_S}s; the sweep gets the rest" \
    "less ${PACK_S}s, then SIGINT (rows so far kept) and SIGKILL ${KILL_AFTER_S}s later"
  exit 0
fi
if [ "$CUDA_OK" != 1 ] && [ "$DEVICE" != cpu ]; then
  echo "error: no CUDA device visible to torch (check nvidia-smi and CUDA_VISIBLE_DEVICES); try --dry-run" >&2
  exit 1
fi
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1

tests_rc=skipped
if [ "$TESTS_WALL_S" -gt 0 ]; then
  echo "== cuda-marked tests (up to ${TESTS_WALL_S}s)"
  per_test=()
  if "$PYTHON" -c "import pytest_timeout" 2>/dev/null; then per_test=(--timeout 120); fi
  set +e
  timeout -s INT -k "$KILL_AFTER_S" "$TESTS_WALL_S" "$PYTHON" -m pytest -q -m cuda -p no:cacheprovider \
    "${per_test[@]}" --junitxml "$OUT/tests.xml" tests > "$OUT/tests.log" 2>&1
  tests_rc=$?
  set -e
  tail -n 30 "$OUT/tests.log"
  echo "tests: exit $tests_rc after $((SECONDS - START))s"
fi

left=$((CHECK_WALL_S - (SECONDS - START) - PACK_S))
runs=$(mktemp -d /tmp/gpu-check-runs.XXXXXX)
sweep_rc=skipped
if [ "$left" -lt 60 ]; then
  echo "sweep: not started, only ${left}s left of CHECK_WALL_S=${CHECK_WALL_S}"
else
  echo "== trimmed sweep (guard ${left}s): ${variants}"
  set +e
  timeout -s INT -k "$KILL_AFTER_S" "$left" "${sweep[@]}" --out "$runs" --run-id "$RUN_ID"
  sweep_rc=$?
  set -e
  [ "$sweep_rc" = 124 ] && echo "sweep: stopped by the wall-time guard after ${left}s; the rows written are kept"
fi

run_dir="$runs/$RUN_ID"
if [ -f "$run_dir/rows.jsonl" ]; then
  cp "$run_dir/rows.jsonl" "$OUT/rows.jsonl"
  tar -czf "$OUT/run.tar.gz" -C "$runs" "$RUN_ID"
  "$PYTHON" - "$run_dir/rows.jsonl" <<'PY'
import collections, json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print(f"rows: {len(rows)}", dict(collections.Counter(r.get("status") for r in rows)))
for r in rows:
    if r.get("status") not in ("ok", "unsupported"):
        print(f"  {r.get('status')}: {r.get('variant')} {r.get('config', {}).get('backend', '')} N={r.get('seq_len')} "
              f"{r.get('mode')} {r.get('phase')} causal={r.get('causal')}: {str(r.get('reason'))[:200]}")
PY
fi
echo "done in $((SECONDS - START))s: tests exit $tests_rc, sweep exit $sweep_rc; files in $OUT"
{ [ "$tests_rc" = 0 ] || [ "$tests_rc" = skipped ]; } && { [ "$sweep_rc" = 0 ] || [ "$sweep_rc" = 124 ]; }
