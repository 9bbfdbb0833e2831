"""Running a sweep: the spec checked by its executor, cells out, rows appended, the report at the end."""

from harness.runner.run import check_resume, finish_run, plan_lines, resume_spec, run_sweep, sweep_spec, where_keys

__all__ = ["check_resume", "finish_run", "plan_lines", "resume_spec", "run_sweep", "sweep_spec", "where_keys"]
