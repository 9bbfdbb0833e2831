"""Running a sweep: the spec checked by its executor, cells out, rows appended, the report at the end."""
from harness.runner.run import finish_run, plan_lines, run_sweep, sweep_spec

__all__ = ["finish_run", "plan_lines", "run_sweep", "sweep_spec"]
