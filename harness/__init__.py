"""attnsuite harness: sweep variants over sequence lengths, measure, store, report.

Run ``python -m harness --help``. Each stage is a module you can call from Python:
spec -> plan -> inputs -> [calibrate] -> measure -> store -> report.
"""
