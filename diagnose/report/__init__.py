"""The report as data: its frozen model and codec (model/), the sweep and experiment reports'
(load_report.py, step_diagnosis.py), reading a written .json or .html report back (reader.py)
and the redaction every command line gets before it is written (redact.py). Built by run/
(build_report.py); imports nothing above it (docs/architecture.md)."""
