"""validate's report.html as a browser shows it: open it in headless Chromium, read the DOM Chromium built and a
screenshot of the page, and check what a reader needs to see.

  python tests/harness/lab/check_report_html.py REPORT_DIR [--chromium PATH]

REPORT_DIR holds what write_report wrote (report.json, report.html). Checks: table#summary has one body row per
node of report.json's summary, named by its first cell; each of #plot-nccl, #plot-disk, #plot-gpus and
#plot-datasets holds an <svg> with drawn <path>s; the screenshot (REPORT_DIR/report.png, 1400x3000, kept as the
artifact) is not blank: many distinct colours, the summary's pass green among them, and its fail red when a node
failed. Chromium: tests/harness/setup/ensure_chromium.sh installs it.
Exit status: 0 passed, 1 a check failed (each problem on its own line), 2 could not check (no Chromium, no report,
Chromium failed or timed out).
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import plots  # noqa: E402

PLOT_IDS = ("plot-nccl", "plot-disk", "plot-gpus", "plot-datasets")
# The least any plot draws (one with nothing to show still has its background, axes and a title saying why); an
# <svg> that is not a drawn figure has none.
MIN_PATHS = 3
MIN_COLOURS = 16
MIN_STATUS_PIXELS = 200  # a summary cell is about 20x20 pixels
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class CheckError(Exception):
    """The check could not run (exit 2)."""


class _Dom(HTMLParser):
    """What the checks need from a serialised DOM: per plot container the <svg>s and drawn <path>s inside it, and
    the first cell's text of each body row of table#summary."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []
        self.plots = {plot_id: {"svg": 0, "path": 0, "text": 0} for plot_id in PLOT_IDS}
        self.summary_found = False
        self.rows = []
        self._cell = None

    def _inside(self, element_id):
        return any(identifier == element_id for dummy, identifier in self.stack)

    def _element(self, tag, attributes):
        if attributes.get("id") == "summary" and tag == "table":
            self.summary_found = True
        for plot_id in PLOT_IDS:
            if self._inside(plot_id):
                if tag == "svg":
                    self.plots[plot_id]["svg"] += 1
                elif tag == "path" and (attributes.get("d") or "").strip() and self._inside_tag("svg"):
                    self.plots[plot_id]["path"] += 1
                elif tag == "text" and self._inside_tag("svg"):
                    self.plots[plot_id]["text"] += 1
        if self._inside("summary") and self._inside_tag("tbody"):
            if tag == "tr":
                self.rows.append(None)
            elif tag in ("th", "td") and self.rows and self.rows[-1] is None and self._cell is None:
                self._cell = []

    def _inside_tag(self, name):
        return any(tag == name for tag, dummy in self.stack)

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self._element(tag, attributes)
        if tag not in VOID:
            self.stack.append((tag, attributes.get("id")))

    def handle_startendtag(self, tag, attrs):
        self._element(tag, dict(attrs))

    def handle_endtag(self, tag):
        if tag in ("th", "td") and self._cell is not None and self.rows and self.rows[-1] is None:
            self.rows[-1] = "".join(self._cell).strip()
            self._cell = None
        for depth in range(len(self.stack) - 1, -1, -1):
            if self.stack[depth][0] == tag:
                del self.stack[depth:]
                break

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def dom_problems(dom, node_names):
    """Problems (strings) with a serialised DOM, given the report's node names in order."""
    parsed = _Dom()
    parsed.feed(dom)
    parsed.close()
    problems = []
    if not parsed.summary_found:
        problems.append("no table#summary in the page")
    elif parsed.rows != list(node_names):
        problems.append("table#summary rows name %s; report.json's nodes are %s" % (parsed.rows, list(node_names)))
    for plot_id, seen in parsed.plots.items():
        if not seen["svg"]:
            problems.append("#%s holds no <svg> (missing container or plot)" % plot_id)
        elif seen["path"] < MIN_PATHS or not seen["text"]:
            problems.append("#%s: its <svg> has %d drawn path(s) and %d text(s); a drawn plot has %d or more paths and "
                            "a title" % (plot_id, seen["path"], seen["text"], MIN_PATHS))
    return problems, parsed


def _near(pixel, colour, tolerance=8):
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, colour))


def _rgb(hex_colour):
    return tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))


def screenshot_problems(png, failed):
    """Problems with the screenshot: too few colours, no pass green, no fail red although a node failed."""
    from PIL import Image  # Pillow comes with matplotlib, in the repository's venv

    with Image.open(png) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 24)
    problems = []
    if len(colours) < MIN_COLOURS:
        problems.append("the screenshot has %d distinct colour(s), fewer than %d: a blank or unstyled page"
                        % (len(colours), MIN_COLOURS))
    wanted = [("pass green", plots.PASS)] + ([("fail red", plots.FAIL)] if failed else [])
    for name, hex_colour in wanted:
        count = sum(n for n, pixel in colours if _near(pixel, _rgb(hex_colour)))
        if count < MIN_STATUS_PIXELS:
            problems.append("the screenshot has %d pixel(s) of the summary's %s %s, fewer than %d"
                            % (count, name, hex_colour, MIN_STATUS_PIXELS))
    return problems, len(colours)


def _chromium(browser, profile, *arguments):
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=%s" % profile] + list(arguments)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        raise CheckError("%s did not finish within 120 s" % " ".join(command))
    if result.returncode != 0:
        raise CheckError("%s exited %d:\n%s" % (" ".join(command), result.returncode, result.stderr[-3000:]))
    return result.stdout


def check(report_dir, browser):
    report_dir = pathlib.Path(report_dir).resolve()
    page, data = report_dir / "report.html", report_dir / "report.json"
    for path in (page, data):
        if not path.is_file():
            raise CheckError("%s is missing: write the report first (write_report)" % path)
    summary = json.loads(data.read_text())["summary"]
    screenshot = report_dir / "report.png"
    screenshot.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="check-report-chromium-") as profile:
        dom = _chromium(browser, profile, "--dump-dom", page.as_uri())
        _chromium(browser, profile, "--screenshot=%s" % screenshot, "--window-size=1400,3000", page.as_uri())
    if not screenshot.is_file():
        raise CheckError("chromium wrote no screenshot at %s" % screenshot)
    problems, parsed = dom_problems(dom, list(summary["nodes"]))
    shot_problems, colours = screenshot_problems(screenshot, summary["status"] == "fail")
    return problems + shot_problems, parsed, colours, screenshot


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("report_dir")
    parser.add_argument("--chromium", default=shutil.which("chromium"),
                        help="the browser (default: chromium on PATH; tests/harness/setup/ensure_chromium.sh installs it)")
    options = parser.parse_args(argv)
    if not options.chromium:
        print("check_report_html: no chromium on PATH: run tests/harness/setup/ensure_chromium.sh", file=sys.stderr)
        return 2
    try:
        problems, parsed, colours, screenshot = check(options.report_dir, options.chromium)
    except CheckError as error:
        print("check_report_html: could not check: %s" % error, file=sys.stderr)
        return 2
    for problem in problems:
        print("check_report_html: FAILED: %s" % problem, file=sys.stderr)
    if not problems:
        print("check_report_html: passed: %d summary row(s); plots %s; %d colours in the screenshot" % (
            len(parsed.rows), ", ".join("%s %d paths" % (plot_id, seen["path"]) for plot_id, seen in parsed.plots.items()),
            colours))
    print("screenshot: %s" % screenshot)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
