# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The four plots of validate's report.html, drawn with matplotlib and returned as inline SVG text.

matplotlib is imported only when a plot is drawn (the rest of the report needs nothing beyond the standard library).
The figures use matplotlib's object API (Figure + its SVG canvas), never pyplot, so no GUI backend is selected and
no global figure state is touched in the controller process. Every figure is drawn under matplotlib's built-in
defaults (a user's matplotlibrc is ignored) with a fixed svg.hashsalt and no date metadata, and its element ids
carry the plot's id as a prefix: the same report gives byte-identical SVG, and four figures in one HTML page never
share an id.
"""

import io
import re
import textwrap

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.byte_units import byte_unit, human_bytes

PASS, FAIL, SKIP = "#2da44e", "#cf222e", "#8c959f"
STATUS_COLOURS = {"pass": PASS, "fail": FAIL, "skip": SKIP}
FLOOR = "#6e2b8f"
READ, WRITE = "#0969da", "#bf8700"
MODEL_COLOURS = ("#0969da", "#bf8700", "#8250df", "#1b7c83", "#bc4c00", "#4d2d00", "#57606a", "#a40e26")

_XML_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.S)
_ID = re.compile(r'(\bid="|xlink:href="#|url\(#)([^")]+)')


class MissingMatplotlib(ImportError):
    pass


def require_matplotlib():
    try:
        import matplotlib  # noqa: F401  (only to learn whether it is there)
    except ImportError as error:
        raise MissingMatplotlib(
            "report.html needs matplotlib, which this Python (the controller's) cannot import (%s): "
            "pip install matplotlib on the controller, or in the execution environment "
            "(dlinfra.gpu_cluster's meta/ee-requirements.txt lists it)" % error)


def _wrap(lines, width=110):
    return "\n".join(textwrap.fill(textwrap.shorten(line, 3 * width, placeholder=" ..."), width, subsequent_indent="    ")
                     for line in lines)


def _note_height(lines):
    return 0.2 * len(_wrap(lines).splitlines()) + 0.3 if lines else 0


def render(plot_id, draw, size):
    """draw(figure) onto a new figure of size (inches); the figure as <svg>...</svg> text with ids prefixed."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update({"svg.hashsalt": plot_id, "svg.fonttype": "none", "font.size": 9,
                                    "text.parse_math": False,  # a '$' in a reason or a path is text, not TeX
                                    "axes.spines.top": False, "axes.spines.right": False})
        figure = Figure(figsize=size, layout="constrained")
        draw(figure)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = _XML_PROLOGUE.sub("", buffer.getvalue().decode("utf-8"), count=1)
    return _ID.sub(lambda match: "%s%s-%s" % (match.group(1), plot_id, match.group(2)), svg)


def _notes(figure, main_height, lines):
    """The main axes, above a text panel that lists lines (why something is missing) when there are any."""
    if not lines:
        return figure.add_subplot()
    axes, notes = figure.subplots(2, 1, height_ratios=[main_height, _note_height(lines)])
    notes.axis("off")
    notes.text(0, 1, _wrap(lines), va="top", ha="left", fontsize=8, color="#3d444d", transform=notes.transAxes)
    return axes


def _empty(axes, message, keep_x=False):
    """A message in the middle of axes that have nothing to plot; their meaningless 0..1 ticks are hidden."""
    axes.set_yticks([])
    if not keep_x:
        axes.set_xticks([])
    axes.text(0.5, 0.5, message, ha="center", va="center", fontsize=10, color="#57606a", transform=axes.transAxes)


def _legend_outside(axes, **options):
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, **options)


def _floor_segments(axes, xs, floors, width, label):
    drawn = False
    for x, floor in zip(xs, floors):
        if floor is not None and floor > 0:
            axes.hlines(floor, x - width / 2, x + width / 2, colors=FLOOR, linestyles="--", linewidth=1.5,
                        label=None if drawn else label)
            drawn = True


def draw_nccl(figure, rows):
    skipped = _nccl_notes(rows)
    axes = _notes(figure, 3.6, skipped)
    axes.set_title("NCCL all-reduce bus bandwidth (nccl-tests busbw)")
    axes.set_ylabel("busbw (GB/s)")
    if not rows:
        _empty(axes, "no NCCL measurement in this report")
        return
    xs = list(range(len(rows)))
    labels = ["%s\n(%s)" % (row["name"], row["scope"]) for row in rows]
    for x, row in zip(xs, rows):
        value = row.get("busbw_gbps")
        if value is None:
            axes.text(x, 0, "skipped", ha="center", va="bottom", rotation=90, color=SKIP)
            continue
        axes.bar(x, value, width=0.6, color=STATUS_COLOURS.get(row.get("status"), SKIP))
        axes.annotate("%.1f" % value, (x, value), ha="center", va="bottom", xytext=(0, 2), textcoords="offset points")
    _floor_segments(axes, xs, [row.get("floor_gbps") for row in rows], 0.8, "floor")
    axes.set_xticks(xs, labels)
    axes.set_xlim(-0.6, len(rows) - 0.4)
    if len(skipped) == len(rows):
        axes.set_ylim(0, 1)
        _empty(axes, "nothing measured: the reasons are listed below", keep_x=True)
    if axes.get_legend_handles_labels()[0]:
        _legend_outside(axes)


def draw_disk(figure, rows):
    axes = _notes(figure, 3.8, _disk_notes(rows))
    axes.set_title("Staging filesystem: sequential read and write")
    axes.set_ylabel("MB/s")
    if not rows:
        _empty(axes, "no storage measurement in this report")
        return
    xs = list(range(len(rows)))
    width = 0.38
    for offset, what, colour in ((-width / 2, "read", READ), (width / 2, "write", WRITE)):
        positions = [x + offset for x in xs]
        for x, row in zip(positions, rows):
            value = row.get(what + "_mbps")
            if value is None:
                axes.text(x, 0, "n/a", ha="center", va="bottom", rotation=90, color=SKIP)
            else:
                axes.annotate("%.0f" % value, (x, value), ha="center", va="bottom", xytext=(0, 2),
                              textcoords="offset points", fontsize=8)
        axes.bar(positions, [row.get(what + "_mbps") or 0 for row in rows], width=width, color=colour, label=what)
        _floor_segments(axes, positions, [row.get("floor_%s_mbps" % what) for row in rows], width,
                        "floor (%s)" % what)
    labels = []
    for row in rows:
        label = "%s\n%s" % (row["node"], row["path"])
        if row.get("free_bytes") is not None and row.get("size_bytes"):
            label += "\n%.0f%% free of %s" % (100.0 * row["free_bytes"] / row["size_bytes"], human_bytes(row["size_bytes"]))
        labels.append(label)
    axes.set_xticks(xs, labels)
    _legend_outside(axes)


def draw_gpus(figure, rows):
    axes = figure.add_subplot()
    axes.set_title("GPUs per rack, by model")
    axes.set_ylabel("GPUs")
    if not rows:
        _empty(axes, "no GPU node in this report")
        return
    from matplotlib.ticker import MaxNLocator

    racks, models = [], []
    for row in rows:
        rack = (row.get("cluster"), row.get("rack"))
        if rack not in racks:
            racks.append(rack)
        if (row.get("model") or "unknown model") not in models:
            models.append(row.get("model") or "unknown model")
    xs = list(range(len(racks)))
    bottoms = [0] * len(racks)
    for index, model in enumerate(models):
        heights = [sum(row["count"] for row in rows if (row.get("cluster"), row.get("rack")) == rack
                       and (row.get("model") or "unknown model") == model) for rack in racks]
        axes.bar(xs, heights, width=0.6, bottom=bottoms, label=model, color=MODEL_COLOURS[index % len(MODEL_COLOURS)])
        bottoms = [bottom + height for bottom, height in zip(bottoms, heights)]
    for x, rack, total in zip(xs, racks, bottoms):
        nodes = sum(1 for row in rows if (row.get("cluster"), row.get("rack")) == rack)
        axes.annotate("%d GPUs, %d node%s" % (total, nodes, "" if nodes == 1 else "s"), (x, total), ha="center",
                      va="bottom", xytext=(0, 2), textcoords="offset points", fontsize=8)
    axes.set_xticks(xs, ["%s\n(%s)" % (rack or "no rack", cluster or "no cluster") for cluster, rack in racks])
    axes.set_xlim(-0.6, len(racks) - 0.4)
    axes.set_ylim(0, max(bottoms + [1]) * 1.2)
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    _legend_outside(axes, title="model")


def draw_datasets(figure, rows):
    if not rows:
        axes = figure.add_subplot()
        axes.set_title("Dataset placement")
        _empty(axes, "no staged dataset in this report")
        return
    panels = figure.subfigures(len(rows), 1) if len(rows) > 1 else [figure]
    for panel, row in zip(panels, rows):
        where = " in %s" % row["cluster"] if row.get("cluster") else ""
        panel.suptitle("%s%s: %d replica%s (%s), %d shards, %s" % (
            row["name"], where, row["replicas"], "" if row["replicas"] == 1 else "s", row["mode"], row["shard_count"],
            human_bytes(row["total_bytes"])), fontsize=10)
        nodes = list(row["nodes"])
        xs = list(range(len(nodes)))
        scale, unit = byte_unit(max([1] + [value for counts in row["nodes"].values() for value in
                                           (counts["planned_bytes"], counts["present_bytes"])]))
        with_ranks = all("rank_bytes" in row["nodes"][node] for node in nodes)
        columns = panel.subplots(1, 3 if with_ranks else 2)
        if with_ranks:
            _draw_ranks(columns[2], row, nodes, scale, unit)
        for axes, what, label in zip(columns, ("shards", "bytes"), ("shards", unit)):
            planned = [row["nodes"][node]["planned_" + what] / (scale if what == "bytes" else 1) for node in nodes]
            present = [row["nodes"][node]["present_" + what] / (scale if what == "bytes" else 1) for node in nodes]
            axes.bar([x - 0.2 for x in xs], planned, width=0.4, color="none", edgecolor="#57606a", hatch="//",
                     label="planned")
            axes.bar([x + 0.2 for x in xs], present, width=0.4, label="present",
                     color=[PASS if got == want else FAIL for got, want in zip(present, planned)])
            axes.set_xticks(xs, nodes)
            axes.set_ylabel(label)
            axes.set_title("%s per node" % what, fontsize=9)
            axes.set_ylim(0, max(planned + present + [1]) * 1.25)
            axes.legend(loc="upper center", ncols=2, fontsize=8)


def _draw_ranks(axes, row, nodes, scale, unit):
    """Each rank's bytes, grouped by node, against its fair share (the node's fair bytes over its ranks)."""
    x, ticks = 0.0, []
    for node in nodes:
        counts = row["nodes"][node]
        ranks = counts["rank_bytes"]
        width = 0.8 / max(1, len(ranks))
        lefts = [x - 0.4 + width * (index + 0.5) for index in range(len(ranks))]
        axes.bar(lefts, [value / scale for value in ranks], width=width * 0.9, color=PASS)
        fair = counts["fair_bytes"] / max(1, counts["ranks"]) / scale
        axes.hlines(fair, x - 0.45, x + 0.45, colors="#57606a", linestyles="dashed")
        ticks.append(x)
        x += 1.0
    axes.set_xticks(ticks, nodes)
    axes.set_ylabel(unit)
    balance = row.get("balance")
    axes.set_title("bytes per rank against the fair share (dashed)%s" % (
        "" if balance is None else ", balance %.3f" % balance), fontsize=9)


def _nccl_notes(rows):
    return ["%s %s: %s" % (row["scope"], row["name"], row.get("reason") or row.get("status") or "no measurement")
            for row in rows if row.get("busbw_gbps") is None]


def _disk_notes(rows):
    return ["%s %s: %s not measured" % (row["node"], row["path"], " and ".join(
        what for what in ("read", "write") if row.get(what + "_mbps") is None))
        for row in rows if row.get("read_mbps") is None or row.get("write_mbps") is None]


PLOTS = (
    ("plot-nccl", "nccl_busbw", draw_nccl, lambda rows: (9, 3.6 + _note_height(_nccl_notes(rows)))),
    ("plot-disk", "disk", draw_disk, lambda rows: (9, 3.8 + _note_height(_disk_notes(rows)))),
    ("plot-gpus", "gpus", draw_gpus, lambda rows: (9, 3.6)),
    ("plot-datasets", "datasets", draw_datasets, lambda rows: (9, 3.2 * max(1, len(rows)))),
)


def plots(measurements):
    """{plot id: <svg> text} for the four plots, in page order."""
    require_matplotlib()
    result = {}
    for plot_id, key, draw, size in PLOTS:
        rows = measurements.get(key) or []
        result[plot_id] = render(plot_id, lambda figure, draw=draw, rows=rows: draw(figure, rows), size(rows))
    return result
