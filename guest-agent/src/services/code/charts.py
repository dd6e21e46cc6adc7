"""Chart data of a matplotlib figure, for the interpreter driver.

The driver (driver.py) loads this source as a module the first time it
shows a figure, and sends `chart(figure)` beside the figure's PNG under the
MIME type the agent names on its command line
(airlock_proto::contract::code::CHART_MIME_TYPE). The figure has been
drawn (saved as PNG) first, so its tick labels are the ones in the image.

The data is a JSON object in the vocabulary of E2B's charts, which E2B's
code-interpreter SDKs parse:

  every chart       type, title, elements
  line, scatter     x_label, y_label, x_unit, y_unit (the unit is the
                    label's last "(...)" or "[...]"), x_ticks,
                    x_tick_labels, x_scale, y_ticks, y_tick_labels,
                    y_scale; elements [{label, points: [[x, y], ...]}]
  bar               the labels and units; elements [{label, group, value}]
  pie               elements [{label, angle (degrees), radius}]
  box_and_whisker   the labels and units; elements [{label, min,
                    first_quartile, median, third_quartile, max, outliers}]
  superchart        a figure of several axes: its suptitle, and one chart
                    per axes as elements
  unknown           axes whose artists fit none of these: title only

An axes is classified by what it holds: only wedges is a pie, only bar
containers' rectangles is a bar chart, boxes (rectangles drawn as lines or
patches) each with a median and whiskers is a box plot, only lines is a
line chart, only marker collections is a scatter chart. Reference lines
(axhline, axvline: not in data coordinates) are left out.

Values: dates are ISO 8601 text, a categorical axis's values are the
categories' names, numbers are floats, and what is not finite is null.
Scales are matplotlib's (linear, log, symlog, logit, ...), or datetime and
categorical for date and category axes. The x axis of a bar or box chart is
the categories' axis, whichever way the bars or boxes lie. Unlabelled
series are "Line N", "Series N", "Group N" or "Slice N", from 1.
"""

import datetime
import math
import re

from matplotlib import rcParams
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer
from matplotlib.patches import PathPatch, Wedge
from matplotlib.ticker import FixedFormatter, FixedLocator

# A label's unit: its last parenthesized or bracketed part.
UNIT = re.compile(r"(?:\(([^()]*)\)|\[([^\[\]]*)\])\s*$")


def chart(figure):
    """The figure's chart data, or None for a figure without axes."""
    axes = [ax for ax in figure.get_axes() if ax.get_visible()]
    if not axes:
        return None
    if len(axes) == 1:
        return axes_chart(axes[0])
    return {
        "type": "superchart",
        "title": suptitle(figure),
        "elements": [axes_chart(ax) for ax in axes],
    }


def suptitle(figure):
    text = getattr(figure, "_suptitle", None)
    return text_or_none(text.get_text() if text is not None else "")


def axes_chart(ax):
    lines = [line for line in ax.lines if line.get_visible() and line.get_transform() is ax.transData]
    collections = [c for c in ax.collections if c.get_visible()]
    patches = [p for p in ax.patches if p.get_visible()]
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    if patches and not lines and not collections and all(isinstance(p, Wedge) for p in patches):
        return pie_chart(ax, patches)
    if bars and not lines and not collections:
        in_bars = {id(p) for container in bars for p in container.patches}
        if all(id(p) in in_bars for p in patches):
            return bar_chart(ax, bars)
    if not collections and (lines or patches):
        boxes = box_chart(ax, lines, patches)
        if boxes is not None:
            return boxes
    if lines and not patches and not collections:
        return point_chart(ax, "line", line_series(ax, lines))
    if collections and not lines and not patches:
        if all(isinstance(c, PathCollection) for c in collections):
            return point_chart(ax, "scatter", scatter_series(ax, collections))
    return {"type": "unknown", "title": title(ax), "elements": []}


class Axis:
    """One axis of an axes: its kind (datetime, categorical or plain) and
    how a value on it is written."""

    def __init__(self, axis):
        self.axis = axis
        getter = getattr(axis, "get_converter", None)
        converter = getter() if getter is not None else getattr(axis, "converter", None)
        module = type(converter).__module__ if converter is not None else ""
        self.kind = {"matplotlib.dates": "datetime", "matplotlib.category": "categorical"}.get(module)
        mapping = getattr(getattr(axis, "units", None), "_mapping", None) or {}
        self.categories = {index: name for name, index in mapping.items()}

    def scale(self):
        return self.kind or self.axis.get_scale()

    def value(self, value):
        """A data value as JSON: ISO text, a category, a float or None."""
        if isinstance(value, str):
            return str(value)
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, datetime.date):
            return value.isoformat()
        if type(value).__name__ == "datetime64":
            return str(value.astype("datetime64[s]"))
        try:
            number = float(value)
        except (TypeError, ValueError):
            return str(value)
        if not math.isfinite(number):
            return None
        return self.position(number)

    def position(self, number):
        """A position on the axis (a converted value) as JSON."""
        if self.kind == "datetime":
            return date_text(number)
        if self.kind == "categorical" and number == int(number):
            name = self.categories.get(int(number))
            if name is not None:
                return str(name)
        return number

    def ticks(self):
        """The ticks in view: positions and their labels' text."""
        low, high = sorted(float(v) for v in self.axis.get_view_interval())
        slack = (high - low) * 1e-9
        positions, labels = [], []
        for position, label in zip(self.axis.get_ticklocs(), self.axis.get_ticklabels()):
            position = float(position)
            if not low - slack <= position <= high + slack:
                continue
            positions.append(date_text(position) if self.kind == "datetime" else tidy(position))
            labels.append(label.get_text())
        return positions, labels

    def label_at(self, position):
        """The name of the bar or box at `position`: its category; the
        label of the tick at it; with ticks placed by hand (grouped bars
        beside them), the nearest one's; else the value."""
        if self.kind == "categorical":
            name = self.categories.get(int(round(position)))
            if name is not None and close(position, round(position)):
                return str(name)
        ticks = [
            (float(loc), label.get_text())
            for loc, label in zip(self.axis.get_ticklocs(), self.axis.get_ticklabels())
            if label.get_text()
        ]
        if ticks:
            loc, text = min(ticks, key=lambda tick: abs(tick[0] - position))
            if close(loc, position):
                return text
            locs = sorted(loc for loc, _ in ticks)
            gaps = [b - a for a, b in zip(locs, locs[1:]) if b > a]
            reach = min(gaps) / 2 if gaps else math.inf
            placed = isinstance(self.axis.get_major_locator(), FixedLocator) or isinstance(
                self.axis.get_major_formatter(), FixedFormatter
            )
            if placed and abs(loc - position) < reach:
                return text
        value = self.position(position)
        return value if isinstance(value, str) else "%g" % value


def date_text(number):
    from matplotlib import dates

    return dates.num2date(number).isoformat()


def tidy(number):
    """A tick's position without float noise (1.2, not 1.2000000000000002)."""
    return float("%.12g" % number)


def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def text_or_none(text):
    return text if text else None


def title(ax):
    for loc in ("center", "left", "right"):
        text = ax.get_title(loc=loc)
        if text:
            return text
    return None


def unit(label):
    if not label:
        return None
    match = UNIT.search(label)
    if match is None:
        return None
    return match.group(1) if match.group(1) is not None else match.group(2)


def series_label(label, word, index):
    if not isinstance(label, str) or not label or label.startswith("_"):
        return "%s %d" % (word, index)
    return label


def labelled(ax, kind, categories_on_y=False):
    """The fields of a 2D chart; with categories on the y axis (barh, a
    horizontal box plot) the axes' labels are swapped, so x is always the
    categories' axis."""
    x_label = text_or_none(ax.get_xlabel())
    y_label = text_or_none(ax.get_ylabel())
    if categories_on_y:
        x_label, y_label = y_label, x_label
    return {
        "type": kind,
        "title": title(ax),
        "x_label": x_label,
        "y_label": y_label,
        "x_unit": unit(x_label),
        "y_unit": unit(y_label),
    }


def point_chart(ax, kind, elements):
    result = labelled(ax, kind)
    for name, axis in (("x", Axis(ax.xaxis)), ("y", Axis(ax.yaxis))):
        positions, labels = axis.ticks()
        result[name + "_ticks"] = positions
        result[name + "_tick_labels"] = labels
        result[name + "_scale"] = axis.scale()
    result["elements"] = elements
    return result


def line_series(ax, lines):
    x, y = Axis(ax.xaxis), Axis(ax.yaxis)
    return [
        {
            "label": series_label(line.get_label(), "Line", index),
            "points": [[x.value(a), y.value(b)] for a, b in zip(line.get_xdata(), line.get_ydata())],
        }
        for index, line in enumerate(lines, 1)
    ]


def scatter_series(ax, collections):
    x, y = Axis(ax.xaxis), Axis(ax.yaxis)
    return [
        {
            "label": series_label(collection.get_label(), "Series", index),
            "points": [[x.value(a), y.value(b)] for a, b in collection.get_offsets()],
        }
        for index, collection in enumerate(collections, 1)
    ]


def pie_chart(ax, wedges):
    return {
        "type": "pie",
        "title": title(ax),
        "elements": [
            {
                "label": series_label(wedge.get_label(), "Slice", index),
                # The wedges' angles are float32: four decimals are exact.
                "angle": round(abs(float(wedge.theta2) - float(wedge.theta1)), 4),
                "radius": float(wedge.r),
            }
            for index, wedge in enumerate(wedges, 1)
        ],
    }


def bar_chart(ax, containers):
    horizontal = any(getattr(c, "orientation", None) == "horizontal" for c in containers)
    categories = Axis(ax.yaxis if horizontal else ax.xaxis)
    result = labelled(ax, "bar", categories_on_y=horizontal)
    elements = []
    for index, container in enumerate(containers, 1):
        group = series_label(container.get_label(), "Group", index)
        values = getattr(container, "datavalues", None)
        for i, rect in enumerate(container.patches):
            if horizontal:
                center = rect.get_y() + rect.get_height() / 2
                size = rect.get_width()
            else:
                center = rect.get_x() + rect.get_width() / 2
                size = rect.get_height()
            value = values[i] if values is not None and i < len(values) else size
            number = float(value)
            elements.append(
                {
                    "label": categories.label_at(float(center)),
                    "group": group,
                    "value": number if math.isfinite(number) else None,
                }
            )
    result["elements"] = elements
    return result


def rectangle(points):
    """(x0, x1, y0, y1) if the points are the corners of an axis-aligned
    rectangle walked around and closed, else None."""
    points = [(float(x), float(y)) for x, y in points]
    if len(points) not in (5, 6) or points[0] != points[-1]:
        return None
    xs = sorted({x for x, _ in points})
    ys = sorted({y for _, y in points})
    if len(xs) != 2 or len(ys) != 2:
        return None
    return xs[0], xs[1], ys[0], ys[1]


def box_chart(ax, lines, patches):
    """A box plot's boxes, or None if the axes do not hold one."""
    boxes = []
    for patch in patches:
        if not isinstance(patch, PathPatch):
            return None
        box = rectangle(patch.get_path().vertices)
        if box is None:
            return None
        boxes.append(box)
    # A box plot's means are markers too: told from its fliers by marker.
    mean_marker = rcParams.get("boxplot.meanprops.marker")
    if mean_marker == rcParams.get("boxplot.flierprops.marker"):
        mean_marker = None
    segments = []
    for line in lines:
        if mean_marker is not None and line.get_marker() == mean_marker:
            continue
        try:
            xs = [float(v) for v in line.get_xdata()]
            ys = [float(v) for v in line.get_ydata()]
        except (TypeError, ValueError):
            return None
        box = rectangle(zip(xs, ys)) if not patches else None
        if box is not None:
            boxes.append(box)
        else:
            segments.append((xs, ys, line.get_linestyle() in ("None", "none", "", " ")))
    if not boxes:
        return None
    for vertical in (True, False):
        found = measure_boxes(boxes, segments, vertical)
        if found is not None:
            break
    else:
        return None
    categories = Axis(ax.xaxis if vertical else ax.yaxis)
    result = labelled(ax, "box_and_whisker", categories_on_y=not vertical)
    result["elements"] = [
        {
            "label": categories.label_at((box["low"] + box["high"]) / 2),
            "min": box["min"],
            "first_quartile": box["q1"],
            "median": box["median"],
            "third_quartile": box["q3"],
            "max": box["max"],
            "outliers": box["outliers"],
        }
        for box in found
    ]
    return result


def measure_boxes(rectangles, segments, vertical):
    """Each box's figures, reading the category along x (vertical boxes)
    or y; None if some segment or box does not fit that reading."""
    boxes = []
    for x0, x1, y0, y1 in rectangles:
        low, high, q1, q3 = (x0, x1, y0, y1) if vertical else (y0, y1, x0, x1)
        boxes.append({"low": low, "high": high, "q1": q1, "q3": q3, "median": None,
                      "min": q1, "max": q3, "marks": []})

    def owner(category):
        for box in boxes:
            if box["low"] - 1e-9 <= category <= box["high"] + 1e-9:
                return box
        return None

    for xs, ys, markers_only in segments:
        cats, vals = (xs, ys) if vertical else (ys, xs)
        if markers_only:
            # Fliers: each point belongs to the box at its category; those
            # beyond the whiskers are its outliers.
            for category, value in zip(cats, vals):
                box = owner(category)
                if box is None:
                    return None
                box["marks"].append(value)
            continue
        if len(cats) != 2:
            return None
        flat = close(vals[0], vals[1])
        if close(cats[0], cats[1]) and not flat:
            # A whisker: from a quartile outwards.
            box = owner(cats[0])
            if box is None:
                return None
            if max(vals) <= box["q1"] or close(max(vals), box["q1"]):
                box["min"] = min(vals)
            elif min(vals) >= box["q3"] or close(min(vals), box["q3"]):
                box["max"] = max(vals)
            else:
                return None
        elif flat:
            # The median spans the box; a cap (narrower, at a whisker's end)
            # tells nothing the whisker did not.
            box = owner((cats[0] + cats[1]) / 2)
            if box is None:
                return None
            spans = close(min(cats), box["low"]) and close(max(cats), box["high"])
            inside = box["q1"] <= vals[0] <= box["q3"]
            if spans and inside and box["median"] is None:
                box["median"] = vals[0]
        else:
            return None
    if any(box["median"] is None for box in boxes):
        return None
    for box in boxes:
        box["outliers"] = [v for v in box["marks"] if v < box["min"] or v > box["max"]]
    return boxes
