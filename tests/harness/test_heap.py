"""harness.heap by what it is for, counted: a process that frees and allocates the same large blocks again takes no
page faults once its heap is kept, and thousands per round without; glibc's own environment variables win."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

ROUNDS = f"""
import json, resource, sys
sys.path.insert(0, {str(REPO)!r})
from harness.heap import keep_freed_memory
record = keep_freed_memory() if sys.argv[1] == "keep" else None
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def one_round():  # four 12 MiB temporaries, freed together: a chunked call's pattern
    blocks = [bytearray(12 << 20) for _ in range(4)]
    del blocks
for _ in range(3):
    one_round()
before = faults()
for _ in range(10):
    one_round()
print(json.dumps({{"faults": (faults() - before) / 10, "record": record}}))
"""


def _rounds(mode: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", ROUNDS, mode], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_a_kept_heap_takes_no_page_faults_where_the_default_takes_thousands():
    plain, kept = _rounds("plain"), _rounds("keep")
    assert plain["faults"] > 4096, plain  # 48 MiB of fresh pages a round: 12,288 pages of 4 KiB
    assert kept["faults"] < 64, kept
    assert kept["record"] == {
        "set_by": "harness (mallopt)",
        "mmap_threshold": 32 << 20,
        "trim_threshold": 2**31 - 1,
        "top_pad": 256 << 20,
    }


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_the_users_malloc_variables_win():
    got = _rounds("keep", MALLOC_TOP_PAD_="0")
    assert got["record"] == {"set_by": "environment", "MALLOC_TOP_PAD_": "0"}
    assert got["faults"] > 4096  # nothing set: the default's faults
