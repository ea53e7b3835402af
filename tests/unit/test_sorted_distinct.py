"""`sorted_distinct` is `np.unique` of integer ids, whichever way it counts them: a count table
(a narrow range), a byte table (keys such as tick x thread spanning tens of millions), or
hashing (a few ids spread thinly, or negative ones)."""

from __future__ import annotations

import numpy as np
import pytest

from diagnose.samples.profile import sorted_distinct


@pytest.mark.parametrize("low, high, n", [
    (0, 50, 10_000),              # narrow: count table
    (0, 2_000_000, 100_000),      # wide but dense enough: byte table
    (10**6, 10**6 + 10**6, 50_000),  # offset from zero: byte table from its low end
    (0, 10**9, 1_000),            # sparse over a wide range: hashed
    (-5_000, 5_000, 20_000),      # negative ids
])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_sorted_distinct_is_numpys_unique(low, high, n, dtype):
    ids = np.random.default_rng(7).integers(low, high, size=n).astype(dtype)
    found = sorted_distinct(ids)
    assert found.dtype == ids.dtype
    assert np.array_equal(found, np.unique(ids))


def test_sorted_distinct_of_nothing_is_empty():
    assert len(sorted_distinct(np.empty(0, dtype=np.int64))) == 0
