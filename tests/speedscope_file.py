"""A sampled `.speedscope.json` file (speedscope's format, not a diagnose report) as the typed
values the tests read: its shared frames and its profiles, each with its samples and weights.
Read straight from the JSON, independently of diagnose's own speedscope readers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# speedscope's keys (https://www.speedscope.app/file-format-schema.json)
SHARED, FRAMES, PROFILES, EXPORTER = "shared", "frames", "profiles", "exporter"
NAME, FILE, LINE, SAMPLES, WEIGHTS = "name", "file", "line", "samples", "weights"


@dataclass(frozen=True)
class SpeedscopeFrame:
    name: str
    file: str | None  # optional in the format
    line: int | None


@dataclass(frozen=True)
class SampledProfile:
    name: str
    samples: list[list[int]]  # per sample, indexes into the shared frames, root first
    weights: list[float]


@dataclass(frozen=True)
class SpeedscopeFile:
    frames: list[SpeedscopeFrame]
    profiles: list[SampledProfile]
    exporter: str | None


def speedscope_of(data: dict) -> SpeedscopeFile:
    """A sampled speedscope document; a key a sampled one must have missing is a KeyError."""
    return SpeedscopeFile(
        frames=[SpeedscopeFrame(f[NAME], f.get(FILE), f.get(LINE)) for f in data[SHARED][FRAMES]],
        profiles=[SampledProfile(p[NAME], p[SAMPLES], p[WEIGHTS]) for p in data[PROFILES]],
        exporter=data.get(EXPORTER))


def read_speedscope(path: Path) -> SpeedscopeFile:
    return speedscope_of(json.loads(path.read_text(encoding="utf-8")))
