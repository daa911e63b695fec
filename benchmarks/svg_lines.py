"""A small line chart as an SVG image, with no plotting library: logarithmic axes, one polyline per series.

    write_line_chart(path, title, x_label, y_label, {"series": [(x, y), ...], ...})

Both axes are logarithmic (base 2 on x, base 10 on y), as step times over model widths span orders of magnitude.
The file is written atomically: a temporary file beside the target (a symbolic link's target is the one replaced),
with the old file's permissions, renamed over it.
"""
import math
import os
import tempfile
from xml.sax.saxutils import escape

WIDTH, HEIGHT = 760, 480
LEFT, RIGHT, TOP, BOTTOM = 80, 200, 50, 60
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def _ticks(low, high, base):
    """Powers of `base` covering [low, high] (at least two)."""
    first = math.floor(math.log(low, base))
    last = math.ceil(math.log(high, base))
    if last == first:
        last += 1
    return [base ** k for k in range(first, last + 1)]


def _label(value):
    return f"{value:g}" if value >= 0.01 else f"{value:.0e}"


def line_chart_svg(title, x_label, y_label, series):
    points = [(x, y) for values in series.values() for x, y in values if x > 0 and y > 0]
    if not points:
        raise ValueError("line_chart_svg: no positive points to draw")
    x_ticks = _ticks(min(x for x, _ in points), max(x for x, _ in points), 2)
    y_ticks = _ticks(min(y for _, y in points), max(y for _, y in points), 10)
    x_low, x_high = math.log2(x_ticks[0]), math.log2(x_ticks[-1])
    y_low, y_high = math.log10(y_ticks[0]), math.log10(y_ticks[-1])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x):
        return LEFT + (math.log2(x) - x_low) / (x_high - x_low) * plot_w

    def py(y):
        return TOP + plot_h - (math.log10(y) - y_low) / (y_high - y_low) * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
             f'<text x="{WIDTH / 2}" y="24" text-anchor="middle" font-size="15">{escape(title)}</text>']
    for x in x_ticks:
        parts.append(f'<line x1="{px(x):.1f}" y1="{TOP}" x2="{px(x):.1f}" y2="{TOP + plot_h}" stroke="#ddd"/>')
        parts.append(f'<text x="{px(x):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{_label(x)}</text>')
    for y in y_ticks:
        parts.append(f'<line x1="{LEFT}" y1="{py(y):.1f}" x2="{LEFT + plot_w}" y2="{py(y):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 8}" y="{py(y) + 4:.1f}" text-anchor="end">{_label(y)}</text>')
    parts.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="black"/>')
    parts.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 18}" text-anchor="middle">{escape(x_label)}</text>')
    parts.append(f'<text x="20" y="{TOP + plot_h / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 20 {TOP + plot_h / 2})">{escape(y_label)}</text>')
    for index, (name, values) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        drawn = sorted((x, y) for x, y in values if x > 0 and y > 0)
        if drawn:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in drawn)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
            for x, y in drawn:
                parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        legend_y = TOP + 10 + 22 * index
        parts.append(f'<line x1="{LEFT + plot_w + 15}" y1="{legend_y}" x2="{LEFT + plot_w + 40}" y2="{legend_y}" '
                     f'stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{LEFT + plot_w + 46}" y="{legend_y + 4}">{escape(name)}</text>')
    parts.append("</svg>\n")
    return "\n".join(parts)


def _umask():
    current = os.umask(0)
    os.umask(current)
    return current


def write_line_chart(path, title, x_label, y_label, series):
    text = line_chart_svg(title, x_label, y_label, series)
    path = os.path.realpath(path)
    mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o666 & ~_umask()
    descriptor, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".svg_lines.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as output:
            output.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
