"""Synthetic profiles for unit tests: each thread's stacks, one per sample, interned as py-spy's
readers intern them (frames and distinct stacks by index), 10 ms a sample."""

from __future__ import annotations

import numpy as np

from diagnose.samples.profile import Frame, Profile, ThreadTrack


def profile_of(stacks_by_thread: dict[str, list[list[Frame]]], native: bool = True) -> Profile:
    """Threads named by the keys (tids from 100 up), each sampled once per stack in its list."""
    frames: list[Frame] = []
    stacks: list[tuple[int, ...]] = []
    threads = []
    for tid, (name, per_sample) in enumerate(stacks_by_thread.items(), start=100):
        ids = []
        for stack in per_sample:
            key = []
            for frame in stack:
                if frame not in frames:
                    frames.append(frame)
                key.append(frames.index(frame))
            if tuple(key) not in stacks:
                stacks.append(tuple(key))
            ids.append(stacks.index(tuple(key)))
        threads.append(ThreadTrack(tid=tid, name=name, stack_ids=np.array(ids, dtype=np.int32),
                                   weights=np.full(len(ids), 0.01)))
    return Profile(frames=frames, stacks=stacks, threads=threads, native=native)
