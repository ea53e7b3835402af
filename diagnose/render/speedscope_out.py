"""Writes a profile in the speedscope file format (for inputs that were not speedscope)."""

from __future__ import annotations

import json
from pathlib import Path

from diagnose.model.profile import Profile

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def profile_to_speedscope(profile: Profile, name: str) -> dict:
    frames = [{"name": f.function, "file": f.file, "line": f.line} for f in profile.frames]
    profiles = []
    for track in profile.threads:
        counts = track.counts
        weights = (counts * profile.interval_s).tolist() if counts is not None else track.weights.tolist()
        total = float(sum(weights))
        profiles.append({
            "type": "sampled", "name": (f"Process {track.pid} " if track.pid is not None else "")
            + f'Thread {track.tid} "{track.name}"', "unit": "seconds",
            "startValue": 0.0, "endValue": total,
            "samples": [list(profile.stacks[int(s)]) for s in track.stack_ids],
            "weights": weights,
        })
    return {"$schema": SCHEMA, "shared": {"frames": frames}, "profiles": profiles,
            "name": name, "activeProfileIndex": 0, "exporter": "diagnose"}


def write_speedscope(profile: Profile, path: Path, name: str) -> None:
    path.write_text(json.dumps(profile_to_speedscope(profile, name)), encoding="utf-8")
