"""The project's mutation list stays runnable: every site exists exactly once and every target test exists.

Fast (no mutation is run): a refactor that moves a site fails here, so it is re-anchored in the same change
(`python scripts/mutation_check.py` runs the list; see its docstring).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _mutation_check():
    spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "scripts" / "mutation_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_mutation_site_occurs_exactly_once():
    tool = _mutation_check()
    mutations = tool.load_mutations(tool.DEFAULT_CONFIG, ROOT)  # ConfigError lists every missing or ambiguous site
    assert len(mutations) >= 70


def test_every_mutation_target_exists():
    tool = _mutation_check()
    missing = []
    for mutation in tool.load_mutations(tool.DEFAULT_CONFIG, ROOT):
        for target in mutation.targets:
            path, _, test = target.partition("::")
            file = ROOT / path
            name = test.split("[")[0].split("::")[-1]
            if not file.exists() or (name and not re.search(rf"^\s*def {re.escape(name)}\(", file.read_text(), re.M)):
                missing.append(f"{mutation.id}: {target}")
    assert not missing, "targets that do not exist: " + "; ".join(missing)


def test_slow_marked_targets_are_run_not_deselected():
    # pyproject's addopts deselects `slow` tests; a mutation whose target is slow must still run it
    cmd = _mutation_check().pytest_command("python", ("tests/x.py::test_y",))
    args = cmd[3:]  # after python -m pytest
    assert (
        cmd[:3] == ["python", "-m", "pytest"] and args[args.index("-m") + 1] == "" and args[-1] == "tests/x.py::test_y"
    )
