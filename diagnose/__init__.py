"""diagnose: tells the engineer on call why a multi-threaded Python inference service is slow."""

__version__ = "0.1.0"
