"""A small line chart as PNG with Pillow only: the reward curve of `mmrl plot` and the demo."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

Series = Sequence[tuple[float, float]]

W, H, LEFT, RIGHT, TOP, BOTTOM = 720, 420, 60, 20, 40, 50
COLOURS = [(70, 110, 200), (220, 90, 40), (60, 160, 90)]


def nice_step(raw: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten that is at least `raw` (whole steps on a step axis)."""
    if raw <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def line_chart(
    series: dict[str, Series],
    out: Path,
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_range: tuple[float, float] = (0.0, 1.0),
    markers: Sequence[tuple[float, str]] = (),
) -> Path:
    """Draw each named series (points joined by lines, dots on the points) and vertical marker lines."""
    from PIL import Image, ImageDraw

    xs = [x for points in series.values() for x, _ in points] + [x for x, _ in markers] or [0.0, 1.0]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = y_range
    img = Image.new("RGB", (W, H), "white")
    draw = ImageDraw.Draw(img)

    def px(x: float, y: float) -> tuple[float, float]:
        fx = LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT)
        fy = H - BOTTOM - (min(max(y, y0), y1) - y0) / (y1 - y0) * (H - TOP - BOTTOM)
        return fx, fy

    draw.rectangle([LEFT, TOP, W - RIGHT, H - BOTTOM], outline=(120, 120, 120))
    for i in range(6):
        y = y0 + (y1 - y0) * i / 5
        _, fy = px(x0, y)
        draw.line([LEFT, fy, W - RIGHT, fy], fill=(230, 230, 230))
        draw.text((8, fy - 6), f"{y:.1f}", fill="black")
    tick = nice_step((x1 - x0) / 6)
    x = math.ceil(x0 / tick) * tick
    while x <= x1:
        fx, _ = px(x, y0)
        draw.text((fx - 8, H - BOTTOM + 6), f"{x:g}", fill="black")
        x += tick
    for i, (x, label) in enumerate(markers):
        fx, _ = px(x, y0)
        draw.line([fx, TOP, fx, H - BOTTOM], fill=(200, 0, 0), width=2)
        draw.text((fx + 4, TOP + 4 + 14 * i), label, fill=(200, 0, 0))  # stacked: attempts may start at one step
    for (_name, points), colour in zip(series.items(), COLOURS * 4, strict=False):
        coords = [px(x, y) for x, y in sorted(points)]
        if len(coords) > 1:
            draw.line(coords, fill=colour, width=2)
        for cx, cy in coords:
            draw.ellipse([cx - 3, cy - 3, cx + 3, cy + 3], fill=colour)
    legend_x = LEFT + 10
    for (name, _), colour in zip(series.items(), COLOURS * 4, strict=False):
        draw.rectangle([legend_x, TOP - 18, legend_x + 12, TOP - 6], fill=colour)
        draw.text((legend_x + 16, TOP - 19), name, fill="black")
        legend_x += 20 + 7 * len(name)
    draw.text((W // 2 - 3 * len(title), 3), title, fill="black")
    draw.text((W // 2 - 3 * len(x_label), H - 20), x_label, fill="black")
    draw.text((4, TOP - 25 - 12), y_label, fill="black")
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out)
    return out
