"""Exports of a report to other tools' formats (pprof for Pyroscope and `go tool pprof`)."""
