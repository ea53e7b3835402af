"""A `.speedscope.json` file (speedscope's format, not a diagnose report) as the typed values
the tests read: its shared frames and its profiles, sampled (each with its samples and weights:
what diagnose and py-spy write) or evented (frames opened and closed: what the speedscope app
exports). Read straight from the JSON, independently of diagnose's own speedscope readers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# speedscope's keys (https://www.speedscope.app/file-format-schema.json)
SHARED, FRAMES, PROFILES, EXPORTER = "shared", "frames", "profiles", "exporter"
NAME, FILE, LINE, SAMPLES, WEIGHTS = "name", "file", "line", "samples", "weights"
START_VALUE, END_VALUE, EVENTS, TYPE, AT, FRAME = "startValue", "endValue", "events", "type", "at", "frame"


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


@dataclass(frozen=True)
class FrameEvent:
    type: str  # "O": the frame opens; "C": it closes
    at: float
    frame: int  # an index into the shared frames


@dataclass(frozen=True)
class EventedProfile:
    name: str
    start_value: float
    end_value: float
    events: list[FrameEvent]


@dataclass(frozen=True)
class EventedFile:
    frames: list[SpeedscopeFrame]
    profiles: list[EventedProfile]
    exporter: str | None


def _frames(data: dict) -> list[SpeedscopeFrame]:
    return [SpeedscopeFrame(f[NAME], f.get(FILE), f.get(LINE)) for f in data[SHARED][FRAMES]]


def speedscope_of(data: dict) -> SpeedscopeFile:
    """A sampled speedscope document; a key a sampled one must have missing is a KeyError."""
    return SpeedscopeFile(
        frames=_frames(data),
        profiles=[SampledProfile(p[NAME], p[SAMPLES], p[WEIGHTS]) for p in data[PROFILES]],
        exporter=data.get(EXPORTER))


def evented_of(data: dict) -> EventedFile:
    """An evented speedscope document; a key an evented one must have missing is a KeyError."""
    return EventedFile(
        frames=_frames(data),
        profiles=[EventedProfile(p[NAME], p[START_VALUE], p[END_VALUE],
                                 [FrameEvent(e[TYPE], e[AT], e[FRAME]) for e in p[EVENTS]])
                  for p in data[PROFILES]],
        exporter=data.get(EXPORTER))


def read_speedscope(path: Path) -> SpeedscopeFile:
    return speedscope_of(json.loads(Path(path).read_text(encoding="utf-8")))


def read_evented(path: Path) -> EventedFile:
    return evented_of(json.loads(Path(path).read_text(encoding="utf-8")))
