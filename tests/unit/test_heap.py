"""The heap tuning for large analyses: applied on glibc, left alone when the user tunes it."""

from __future__ import annotations

import os

import pytest

from diagnose import heap


def _glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError, AttributeError):
        return False


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt only")
def test_tunes_glibc(monkeypatch):
    for name in heap._MALLOC_ENV:
        monkeypatch.delenv(name, raising=False)
    assert heap.keep_freed_memory() is True
    assert heap.keep_freed_memory() is True  # again: harmless


def test_user_tuning_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert heap.keep_freed_memory() is False


def test_other_c_library(monkeypatch):
    def no_glibc(name):
        raise ValueError(name)

    monkeypatch.setattr(heap.os, "confstr", no_glibc)
    assert heap.keep_freed_memory() is False


def test_huge_pages_off_for_arrays(monkeypatch):
    import numpy as np

    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    switch = np._core.multiarray._set_madvise_hugepage
    before = switch(True)
    try:
        assert heap.no_huge_pages_for_arrays() is True
        assert switch(True) is False  # it was off
    finally:
        switch(before)


def test_user_huge_page_choice_wins(monkeypatch):
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    assert heap.no_huge_pages_for_arrays() is False
