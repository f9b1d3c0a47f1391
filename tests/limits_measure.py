"""Measures of runs under cluster-wide limits: the most that overlapped, and the most that
started within a window (the limits' end-to-end tests, both modes)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path


def max_overlap(spans: Iterable[tuple[float, float]]) -> int:
    """The most intervals ``(start, end)`` open at one instant (an end before a start at the
    same instant)."""
    spans = list(spans)
    points = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    best = now = 0
    for _, step in points:
        now += step
        best = max(best, now)
    return best


def max_starts_within(starts: Sequence[float], window: float) -> int:
    """The most starts within any ``window`` seconds."""
    ordered = sorted(starts)
    best = j = 0
    for i, start in enumerate(ordered):
        while ordered[j] <= start - window:
            j += 1
        best = max(best, i - j + 1)
    return best


def read_spans(path: Path) -> list[tuple[float, float, str]]:
    """``(start, end, customer)`` of the lines the handlers wrote."""
    out = []
    for line in path.read_text().splitlines():
        start, end, customer, _pid = line.split()
        out.append((float(start), float(end), customer))
    return out
