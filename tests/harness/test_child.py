"""harness.child: the one child-process runner gives back a job's result, or a ChildFailed naming what failed."""

from __future__ import annotations

import pytest

from harness.child import ChildFailed, ChildProcess
from tests.helpers.load import load_scaled

SERVER = "tests.helpers.child_jobs:serve"
LIMIT_S = 60.0  # bounds a hang of a job meant to finish; the timeout test uses its own short limit


def child(tmp_path, entry: str = SERVER) -> ChildProcess:
    return ChildProcess(entry, {"scale": 3}, name="test child", result="answer", temp_root=str(tmp_path))


@pytest.mark.slow
def test_one_child_serves_jobs_in_turn_and_a_jobs_error_costs_only_that_job(tmp_path):
    with child(tmp_path) as runner:
        first = runner.run(["scale", 7], load_scaled(LIMIT_S))
        assert first["value"] == 21  # the setup reached the handler, the job's value came back
        with pytest.raises(ChildFailed, match=r"^test child raised ValueError: bad job 5$") as raised:
            runner.run(["raise", 5], load_scaled(LIMIT_S))
        assert raised.value.status == "error" and raised.value.started
        again = runner.run(["scale", 2], load_scaled(LIMIT_S))
        assert again == {"value": 6, "pid": first["pid"]}  # the same process served all three
        assert len(list(tmp_path.iterdir())) == 1  # its folder, holding its stderr
    assert list(tmp_path.iterdir()) == []  # removed with the child


@pytest.mark.slow
def test_a_job_past_its_limit_is_killed_and_the_next_job_gets_a_fresh_child(tmp_path):
    with child(tmp_path) as runner:
        pid = runner.run(["scale", 1], load_scaled(LIMIT_S))["pid"]
        with pytest.raises(ChildFailed, match=r"^test child did not finish within 0.5 s; its process was killed$") as e:
            runner.run(["sleep", 600], 0.5)
        assert e.value.status == "timeout" and e.value.started and not runner.running
        fresh = runner.run(["scale", 1], load_scaled(LIMIT_S))
        assert fresh["value"] == 3 and fresh["pid"] != pid


@pytest.mark.slow
def test_a_child_that_dies_is_named_by_its_exit_code_or_signal_with_its_last_words(tmp_path):
    with child(tmp_path) as runner:
        with pytest.raises(ChildFailed) as exited:
            runner.run(["exit", 3], load_scaled(LIMIT_S))
        assert exited.value.status == "error"
        assert exited.value.reason == "test child exited with code 3 and no answer: last words before exit 3"
        with pytest.raises(ChildFailed, match=r"^test child was killed by SIGKILL \(most likely") as killed:
            runner.run(["sigkill", 0], load_scaled(LIMIT_S))
        assert killed.value.status == "oom"


@pytest.mark.slow
def test_a_child_that_cannot_start_says_why_and_that_no_job_ran(tmp_path):
    with child(tmp_path, "tests.helpers.child_jobs:broken") as runner:
        with pytest.raises(ChildFailed) as failed:
            runner.run(["scale", 1], load_scaled(LIMIT_S))
    assert failed.value.reason == "test child could not start: RuntimeError: this setup is broken on purpose"
    assert failed.value.status == "error" and not failed.value.started
    assert list(tmp_path.iterdir()) == []
