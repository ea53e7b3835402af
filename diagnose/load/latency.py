"""Latency histograms: HDR histograms (the `hdrhistogram` package) of request latencies in
microseconds, 1 µs to 10 minutes at 3 significant digits (every value within 0.1%).

The load generator records every completed request into one (per worker thread, added together
at the end); the sweep adds a step's windows together with `merge` and reads percentiles with
`percentiles_ms`, so no percentile is ever averaged. `encode` / `decode` keep a histogram in JSON
as a compressed base64 string (HdrHistogram's V2 "histoblob", readable by the other HDR ports).
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional, Sequence, Tuple

from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 600_000_000          # 10 minutes: longer than any request timeout
SIGNIFICANT_DIGITS = 3
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0))


def new_histogram() -> HdrHistogram:
    """An empty latency histogram (µs)."""
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def record_us(hist: HdrHistogram, value_us: float, count: int = 1) -> None:
    """Records `count` latencies of `value_us`, clamped into the histogram's range (hdrh drops
    out-of-range values silently; a latency must never vanish)."""
    hist.record_value(min(HIGHEST_US, max(LOWEST_US, int(round(value_us)))), count)


def record_seconds(hist: HdrHistogram, seconds: float) -> None:
    record_us(hist, seconds * 1e6)


def percentiles_ms(hist: Optional[HdrHistogram]) -> Dict[str, Optional[float]]:
    """{"p50", "p90", "p95", "p99", "max"} in milliseconds; every value None when empty."""
    if hist is None or hist.get_total_count() == 0:
        empty: Dict[str, Optional[float]] = {name: None for name, _ in PERCENTILES}
        return empty | {"max": None}
    # One pass over the counts for all four (get_value_at_percentile walks them each time).
    values = hist.get_percentile_to_value_dict([q for _, q in PERCENTILES])
    out = {name: values[q] / 1e3 for name, q in PERCENTILES}
    out["max"] = hist.get_max_value() / 1e3
    return out


def mean_ms(hist: Optional[HdrHistogram]) -> Optional[float]:
    if hist is None or hist.get_total_count() == 0:
        return None
    return hist.get_mean_value() / 1e3


def merge(histograms: Iterable[Optional[HdrHistogram]]) -> HdrHistogram:
    """A new histogram holding every count of `histograms` (None entries skipped)."""
    total = new_histogram()
    for hist in histograms:
        if hist is not None and hist.get_total_count():
            total.add(hist)
    return total


def from_buckets(buckets: Iterable[Tuple[float, int]]) -> HdrHistogram:
    """A histogram of (value_us, count) pairs: exact buckets such as wrk's."""
    hist = new_histogram()
    for value_us, count in buckets:
        if count > 0:
            record_us(hist, value_us, int(count))
    return hist


def from_percentiles(points_us: Sequence[Tuple[float, float]], total: int) -> HdrHistogram:
    """An approximate histogram of `total` requests from (percentile, value_us) points in
    increasing order (the last one the maximum, at 100): each value gets the share of requests
    between its percentile and the previous one, so the same percentiles read back. Used only
    when a tool gives percentiles and no buckets."""
    hist = new_histogram()
    placed = 0
    for q, value_us in points_us:
        count = (total if q >= 100.0 else int(round(total * q / 100.0))) - placed
        if count > 0:
            record_us(hist, value_us, count)
            placed += count
    return hist


def encode(hist: HdrHistogram) -> str:
    """The histogram as a compressed base64 string, for JSON."""
    blob = hist.encode()
    return blob.decode("ascii") if isinstance(blob, bytes) else blob


def decode(text: str) -> HdrHistogram:
    """The histogram of an `encode` string."""
    return HdrHistogram.decode(text.encode("ascii") if isinstance(text, str) else text)
