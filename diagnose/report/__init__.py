"""The report: built from a capture or a recorded file (the pipeline), and read back from a
written .json or .html report."""
