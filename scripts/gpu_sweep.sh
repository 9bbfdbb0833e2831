#!/usr/bin/env bash
# Run the GPU default sweep (N 1K..64K, bf16, head dims 64 and 128, causal and not, forward and
# training) on a machine with an NVIDIA GPU whose Python already has torch, and write the run folder.
#
#   bash scripts/gpu_sweep.sh [extra sweep flags...]      e.g. --dry-run, --variants dense,chunked
#
# Nothing is downloaded: packages missing from that Python (einops, pandas, matplotlib, triton...)
# are installed from wheels brought along in .whl/ into /tmp/site and put on PYTHONPATH; the repo
# itself goes on PYTHONPATH too. Environment: PYTHON (default python3), OUT (default results),
# WHEELS (default .whl), SITE (default /tmp/site).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
OUT=${OUT:-results}
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/site}

if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  echo "error: $PYTHON has no torch; use a Python with a CUDA build of torch (PYTHON=/path/to/python)" >&2
  exit 1
fi
if compgen -G "$WHEELS/*.whl" > /dev/null; then
  # --no-deps: never replace the machine's own torch; only what the wheels folder brings.
  "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl
fi
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"

missing=$("$PYTHON" - <<'PY'
import importlib.util
print(" ".join(m for m in ("einops", "numpy", "pandas") if importlib.util.find_spec(m) is None))
PY
)
if [ -n "$missing" ]; then
  echo "error: missing Python packages: $missing; bring their wheels in $WHEELS/ (pip download $missing -d $WHEELS)" >&2
  exit 1
fi
"$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'GPU', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"
if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  case " $* " in
    *" --dry-run "*) set -- --device cuda "$@" ;;  # plan the GPU default without a GPU
    *) echo "error: no CUDA device visible to torch (check nvidia-smi and CUDA_VISIBLE_DEVICES)" >&2; exit 1 ;;
  esac
fi
exec "$PYTHON" -m harness sweep --out "$OUT" "$@"
