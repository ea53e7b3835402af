"""Sending reports elsewhere: the push to a Pyroscope server and the `watch` schedule."""
