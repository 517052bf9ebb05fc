"""Server-side SVG: a memory's weight over time (no chart library, nothing to load in the browser).

The curve is the engine's own decay function (`usermem.policy.decay.weight_of`, the one recall ranks
and drops by) evaluated at each sample time with the confirmations and the use known at that time.
usermem keeps a version's *last* use only (not every use), so the chart shows that one use; the
confirmations come from the audit log (`confirm` entries of the key).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup, escape

from usermem.policy.decay import weight_of

W, H = 560, 220
PAD_L, PAD_R, PAD_T, PAD_B = 44, 16, 14, 34
SAMPLES = 160


@dataclass(frozen=True)
class DecaySeries:
    """What the chart draws: sample points (t, weight) and the events, all computed by `decay_series`."""

    points: tuple[tuple[float, float], ...]
    start: float
    now: float
    end: float
    created_at: float
    confirmations: tuple[float, ...]
    last_used_at: float | None
    weight_now: float


def decay_series(*, base: float, half_life_seconds: float, created_at: float, confirmations: Sequence[float],
                 last_used_at: float | None, now: float) -> DecaySeries:
    """Weight at SAMPLES times from the version's creation to a little past `now`."""
    confirms = sorted(t for t in confirmations if created_at <= t <= now)
    span = max(now - created_at, 3600.0)
    end = now + max(0.25 * span, 3600.0)
    points: list[tuple[float, float]] = []
    times = sorted({created_at + (end - created_at) * i / (SAMPLES - 1) for i in range(SAMPLES)}
                   | set(confirms) | {now} | ({last_used_at} if last_used_at is not None else set()))
    for t in times:
        lc = max((c for c in confirms if c <= t), default=None)
        lu = last_used_at if last_used_at is not None and last_used_at <= t else None
        points.append((t, weight_of(base, half_life_seconds, created_at, lc, lu, t)))
    w_now = weight_of(base, half_life_seconds, created_at, confirms[-1] if confirms else None,
                      last_used_at if last_used_at is not None and last_used_at <= now else None, now)
    return DecaySeries(tuple(points), created_at, now, end, created_at, tuple(confirms), last_used_at, w_now)


def _date(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M")


def decay_svg(series: DecaySeries, *, chart_id: str, labels: dict[str, str], confirm_at: float = 0.55,
              drop_at: float = 0.3, judged: bool = True) -> Markup:
    """The chart as an inline <svg role="img"> with a title and a text description (screen readers)."""
    x0, x1 = PAD_L, W - PAD_R
    y0, y1 = H - PAD_B, PAD_T
    t_lo, t_hi = series.start, series.end

    def x(t: float) -> float:
        return x0 + (x1 - x0) * ((t - t_lo) / (t_hi - t_lo) if t_hi > t_lo else 0.0)

    def y(w: float) -> float:
        return y0 - (y0 - y1) * min(max(w, 0.0), 1.0)

    past = [(t, w) for t, w in series.points if t <= series.now]
    future = [(t, w) for t, w in series.points if t >= series.now]

    def path(pts: Sequence[tuple[float, float]]) -> str:
        return " ".join(f"{'M' if i == 0 else 'L'}{x(t):.1f},{y(w):.1f}" for i, (t, w) in enumerate(pts))

    events = [labels["created"]]
    if series.confirmations:
        events.append(f"{labels['confirmed']} ×{len(series.confirmations)}")
    if series.last_used_at is not None:
        events.append(labels["used"])
    desc = labels["summary"].format(start=f"{series.points[0][1]:.2f}", now=f"{series.weight_now:.2f}",
                                    events=", ".join(events))
    if not judged:
        desc += " " + labels["not_judged"]
    e = escape
    parts: list[str] = [
        f'<svg class="decay" viewBox="0 0 {W} {H}" width="100%" role="img" '
        f'aria-labelledby="{e(chart_id)}-t {e(chart_id)}-d" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="{e(chart_id)}-t">{e(labels["title"])}</title>',
        f'<desc id="{e(chart_id)}-d">{e(desc)}</desc>',
        f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="#fafafa" stroke="#ccc"/>',
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<text x="{x0 - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" font-size="11" '
                     f'fill="#444">{tick:.2f}</text>')
    for value, label, colour in ((confirm_at, labels["confirm_line"], "#b26a00"),
                                 (drop_at, labels["drop_line"], "#b00020")):
        parts.append(f'<line class="threshold" data-threshold="{value}" x1="{x0}" x2="{x1}" y1="{y(value):.1f}" '
                     f'y2="{y(value):.1f}" stroke="{colour}" stroke-dasharray="6 4"/>')
        parts.append(f'<text x="{x1 - 4}" y="{y(value) - 4:.1f}" text-anchor="end" font-size="11" '
                     f'fill="{colour}">{e(label)}</text>')
    if len(past) > 1:
        parts.append(f'<path class="weight" d="{path(past)}" fill="none" stroke="#1f5fbf" stroke-width="2"/>')
    if len(future) > 1:
        parts.append(f'<path class="projection" d="{path(future)}" fill="none" stroke="#1f5fbf" '
                     f'stroke-width="2" stroke-dasharray="3 3"/>')
    nx = x(series.now)
    parts.append(f'<line x1="{nx:.1f}" x2="{nx:.1f}" y1="{y1}" y2="{y0}" stroke="#666"/>')
    parts.append(f'<text x="{nx:.1f}" y="{y0 + 26}" text-anchor="middle" font-size="11" fill="#333">'
                 f'{e(labels["now"])}</text>')

    def marker(cls: str, t: float, shape: str, label: str) -> None:
        w = next((pw for pt, pw in series.points if pt >= t), series.points[-1][1])
        cx, cy = x(t), y(w)
        title = f"<title>{e(label)} {e(_date(t))} · {w:.2f}</title>"
        if shape == "circle":
            parts.append(f'<g class="event {cls}"><circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="#1f5fbf"/>'
                         f'{title}</g>')
        elif shape == "diamond":
            parts.append(f'<g class="event {cls}"><path d="M{cx:.1f},{cy - 6:.1f} L{cx + 6:.1f},{cy:.1f} '
                         f'L{cx:.1f},{cy + 6:.1f} L{cx - 6:.1f},{cy:.1f} Z" fill="#2e7d32"/>{title}</g>')
        else:
            parts.append(f'<g class="event {cls}"><rect x="{cx - 4:.1f}" y="{cy - 4:.1f}" width="8" height="8" '
                         f'fill="#6a1b9a"/>{title}</g>')

    marker("created", series.created_at, "circle", labels["created"])
    for c in series.confirmations:
        marker("confirmed", c, "diamond", labels["confirmed"])
    if series.last_used_at is not None and series.last_used_at >= series.created_at:
        marker("used", series.last_used_at, "square", labels["used"])
    parts.append(f'<text x="{x0}" y="{y0 + 14}" font-size="11" fill="#333">{e(_date(t_lo))}</text>')
    parts.append(f'<text x="{x1}" y="{y0 + 14}" text-anchor="end" font-size="11" fill="#333">'
                 f'{e(_date(t_hi))}</text>')
    parts.append("</svg>")
    if any(not math.isfinite(w) for _, w in series.points):  # defensive: never emit NaN coordinates
        return Markup("")
    return Markup("".join(parts))
