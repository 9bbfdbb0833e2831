"""Test helpers shared across the suite: synthetic runs, test-only variants, sweep fixtures."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the repository root
