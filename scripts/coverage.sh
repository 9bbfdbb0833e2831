#!/usr/bin/env bash
# The test suite under coverage.py, child processes included; prints the per-module table and a
# per-package summary (variants, harness/<each subpackage>). Not run by CI (it is the suite, slower).
#   bash scripts/coverage.sh [pytest args...]          e.g. bash scripts/coverage.sh tests/harness
# PYTHON picks the interpreter (default: .venv/bin/python); it needs the `test` extra (coverage>=7.10).
# Config: [tool.coverage.*] in pyproject.toml. Data: .coverage-data/ (combined into .coverage-data/.coverage);
# COVERAGE_HTML=1 also writes htmlcov/.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
export COVERAGE_DATA_DIR="$PWD/.coverage-data"  # absolute: children run from other folders
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout, even when the venv's editable install is another
rm -rf "$COVERAGE_DATA_DIR" && mkdir -p "$COVERAGE_DATA_DIR"
status=0
"$PYTHON" -m coverage run -m pytest -q "$@" || status=$?
"$PYTHON" -m coverage combine --quiet
"$PYTHON" -m coverage report
"$PYTHON" -m coverage json --quiet -o "$COVERAGE_DATA_DIR/coverage.json"
"$PYTHON" scripts/coverage_packages.py "$COVERAGE_DATA_DIR/coverage.json"
if [ "${COVERAGE_HTML:-0}" = 1 ]; then "$PYTHON" -m coverage html --quiet -d htmlcov; fi
exit $status
