"""A job's small chart as inline SVG: one step line per series, each on its own scale.

Each series keeps its value until the next point (a status holds until it changes), and the
last value holds until `now`, so a job that stopped changing shows a flat tail. A series is
scaled to its own range (an inference count and a hard-example count differ by an order of
magnitude); the legend beside the chart gives the values. The output holds only numbers,
fixed markup and the escaped text it is given: it references nothing outside the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from gm.ui.history import Series

WIDTH, HEIGHT, PAD = 200, 40, 3
COLORS = ("#2563eb", "#dc2626", "#059669")  # series 0, 1, 2 (the legend uses the same)


def chart(series: Sequence[Series], *, now: float, label: str) -> str:
    """The `<svg>` element; `label` (escaped here) names the job for assistive tools."""
    head = (f'<svg class="chart" role="img" aria-label="{escape(label)}" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}">')
    lines = [_line(s, i, now) for i, s in enumerate(series[:len(COLORS)])]
    lines = [line for line in lines if line]
    if not lines:
        body = f'<text x="{PAD}" y="{HEIGHT // 2 + 4}" class="nodata">no samples yet</text>'
    else:
        body = "".join(lines)
    return f'{head}<rect class="frame" x="0.5" y="0.5" width="{WIDTH - 1}" height="{HEIGHT - 1}"/>{body}</svg>'


def _line(series: Series, index: int, now: float) -> str:
    """A step path in whole pixels: `H` to the next point's time, `V` to its value; a point that
    moves neither is skipped, so the path has at most two commands per point."""
    points = [(t, v) for t, v in zip(series.times, series.values, strict=True) if v == v]  # NaN: no value
    if not points:
        return ""
    start, end = points[0][0], max(now, points[-1][0])
    low = min(v for _, v in points)
    high = max(v for _, v in points)
    kx = (WIDTH - 2 * PAD) / (end - start) if end > start else 0.0
    ky = (HEIGHT - 2 * PAD) / (high - low) if high > low else 0.0
    base = HEIGHT - PAD if high > low else HEIGHT / 2  # a flat series runs through the middle
    x, y = PAD, round(base)
    parts = [f"M{x} {y}"]
    for t, v in points[1:]:
        nx, ny = round(PAD + (t - start) * kx), round(base - (v - low) * ky)
        if nx != x:
            parts.append(f"H{nx}")
            x = nx
        if ny != y:
            parts.append(f"V{ny}")
            y = ny
    parts.append(f"H{round(PAD + (end - start) * kx) if kx else WIDTH - PAD}")
    return (f'<path class="s{index}" fill="none" stroke="{COLORS[index]}" stroke-width="1.5" '
            f'd="{"".join(parts)}"><title>{escape(series.name)}</title></path>')
