#!/usr/bin/env bash
# Run the GPU default sweep (N 1K..64K, bf16, head dims 64 and 128, causal and not, forward and
# training) on a machine with an NVIDIA GPU whose Python already has torch, and write the run folder.
#
#   bash scripts/gpu_sweep.sh [extra sweep flags...]      e.g. --dry-run, --variants dense,chunked
#
# Packages that Python lacks come from wheels in .whl/ (scripts/_gpu_env.sh: only what is missing, never torch,
# triton or numpy). Environment: PYTHON (default python3), OUT (default results), WHEELS (default .whl), SITE
# (default /tmp/site). The shorter check of every CUDA path: scripts/gpu_check.sh (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results}
source scripts/_gpu_env.sh

if [ "$CUDA_OK" != 1 ]; then
  case " $* " in
    *" --dry-run "*) set -- --device cuda "$@" ;;  # plan the GPU default without a GPU
    *) echo "error: no CUDA device visible to torch (check nvidia-smi and CUDA_VISIBLE_DEVICES)" >&2; exit 1 ;;
  esac
fi
exec "$PYTHON" -m harness sweep --out "$OUT" "$@"
