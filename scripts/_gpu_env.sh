# Sourced by scripts/gpu_sweep.sh and scripts/gpu_check.sh (from the repository root): the machine's Python with
# torch, the wheels it lacks installed from $WHEELS, the repo on PYTHONPATH, and $CUDA_OK (1 when torch sees a GPU).
#
# Nothing is downloaded: packages missing from that Python (xformers; einops, pandas elsewhere) are installed from
# wheels brought along in $WHEELS into $SITE, put on PYTHONPATH: scripts/missing_wheels.py picks only what that
# Python lacks, never torch, triton, numpy or nvidia-* (the CUDA stack the machine's torch is built with), so
# nothing brought shadows the machine's own packages. Environment: PYTHON (default python3), WHEELS (default .whl),
# SITE (default /tmp/site).
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/site}

if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  echo "error: $PYTHON has no torch; use a Python with a CUDA build of torch (PYTHON=/path/to/python)" >&2
  exit 1
fi
if compgen -G "$WHEELS/*.whl" > /dev/null; then
  mapfile -t wheels < <(PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" scripts/missing_wheels.py "$WHEELS")
  if [ "${#wheels[@]}" -gt 0 ]; then
    # --no-deps: a wheel's requirements are the machine's (torch, numpy) or brought as wheels of their own.
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --no-compile \
      --target "$SITE" "${wheels[@]}"
  fi
fi
# PYTHONPATH comes before site-packages, but $SITE holds only what the machine lacks: it shadows nothing.
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
if "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  CUDA_OK=1
else
  CUDA_OK=0
fi
