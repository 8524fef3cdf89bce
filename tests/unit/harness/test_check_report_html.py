# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""check_report_html.py's checks without a browser: the DOM check on the writer's own page (as written, and with a
plot or a row taken out), the screenshot check on made-up images. The Chromium run itself is the harness's."""

import importlib.util
import json
import pathlib
import re

import pytest
from PIL import Image

from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate import plots
from ansible_collections.dlinfra.gpu_cluster.plugins.plugin_utils._validate.report import html_page

ROOT = pathlib.Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "unit" / "plugins" / "plugin_utils" / "_validate" / "fixtures" / "validate_report_3_nodes.json"
NODES = ["sim-gpu1", "sim-gpu2", "sim-gpu3"]


def _load():
    spec = importlib.util.spec_from_file_location("check_report_html", ROOT / "tests" / "harness" / "lab" / "check_report_html.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_report_html = _load()


@pytest.fixture(scope="module")
def page():
    return html_page(json.loads(FIXTURE.read_text()))


def test_the_writers_page_passes(page):
    problems, parsed = check_report_html.dom_problems(page, NODES)
    assert problems == [] and parsed.rows == NODES
    assert all(seen["svg"] == 1 and seen["path"] >= 10 for seen in parsed.plots.values())


def test_a_plot_without_its_svg_and_a_missing_row_are_named(page):
    gpus = re.search(r'(<figure class="plot" id="plot-gpus"><figcaption>[^<]*</figcaption>\n)(<svg.*?</svg>)', page, re.S)
    broken = page.replace(gpus.group(2), "").replace('<tr data-node="sim-gpu3"><th>sim-gpu3</th>', "<tr><th>sim-gpu9</th>")
    problems = check_report_html.dom_problems(broken, NODES)[0]
    assert problems == [
        "table#summary rows name ['sim-gpu1', 'sim-gpu2', 'sim-gpu9']; report.json's nodes are %s" % NODES,
        "#plot-gpus holds no <svg> (missing container or plot)"]


def test_an_svg_with_nothing_drawn_is_named(page):
    empty = re.sub(r'(<figure class="plot" id="plot-disk">.*?)<svg.*?</svg>', r'\1<svg width="10" height="10"></svg>',
                   page, count=1, flags=re.S)
    problems = check_report_html.dom_problems(empty, NODES)[0]
    assert problems == ["#plot-disk: its <svg> has 0 drawn path(s) and 0 text(s); a drawn plot has 3 or more paths and "
                        "a title"]


def _png(path, colours):
    image = Image.new("RGB", (len(colours) * 20, 40), "white")
    for index, colour in enumerate(colours):
        image.paste(colour, (index * 20, 0, index * 20 + 20, 40))
    image.save(path)
    return path


def test_the_screenshot_check(tmp_path):
    many = ["#%02x%02x%02x" % (12 * n, 250 - 9 * n, 5 * n) for n in range(20)]
    assert check_report_html.screenshot_problems(_png(tmp_path / "ok.png", many + [plots.PASS, plots.FAIL]), True)[0] == []
    blank = check_report_html.screenshot_problems(_png(tmp_path / "blank.png", ["white"]), False)[0]
    assert blank == ["the screenshot has 1 distinct colour(s), fewer than 16: a blank or unstyled page",
                     "the screenshot has 0 pixel(s) of the summary's pass green %s, fewer than 200" % plots.PASS]
    no_red = check_report_html.screenshot_problems(_png(tmp_path / "green.png", many + [plots.PASS]), True)[0]
    assert no_red == ["the screenshot has 0 pixel(s) of the summary's fail red %s, fewer than 200" % plots.FAIL]
