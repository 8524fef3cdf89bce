# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""role_docs.py renders the Ansible markup of meta/argument_specs.yml (C(), I(), V(), O(), ...) to Markdown in the
role READMEs' variable tables, instead of showing it raw."""

import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("role_docs", ROOT / "tests" / "harness" / "generate" / "role_docs.py")
role_docs = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(role_docs)
RAW_MARKUP = re.compile(r"\b(?:C|I|B|V|O|RV|E|M|U|L|R|P)\([^)]*\)|HORIZONTALLINE")


@pytest.mark.parametrize("source, markdown", [
    ("Runs C(microk8s config) as root.", "Runs `microk8s config` as root."),
    ("I(must) be B(set)", "*must* be **set**"),
    ("V(cuda) for O(nccl_source), O(state=present), RV(stdout), E(HOME)", "`cuda` for `nccl_source`, `state=present`, `stdout`, `HOME`"),
    ("M(community.general.snap) and P(dlinfra.gpu_cluster.k8s_gpu_job#filter)", "`community.general.snap` and `dlinfra.gpu_cluster.k8s_gpu_job`"),
    ("U(https://example.org/a) or L(the docs, https://example.org/b)", "<https://example.org/a> or [the docs](https://example.org/b)"),
    ("C(<cluster>.kubeconfig) keeps C(a|b) and C(x`y)", "`<cluster>.kubeconfig` keeps `a|b` and ``x`y``"),
    (["First paragraph.", "Second with C(code)."], "First paragraph. Second with `code`."),
])
def test_markup_becomes_markdown(source, markdown):
    assert role_docs.markup(source) == markdown


def test_choices_and_defaults_show_an_empty_string_as_quotes():
    rendered = role_docs.table({"x_source": {"type": "str", "default": "", "choices": ["", "cuda"], "description": "C(x)"}})
    assert rendered.splitlines()[-1] == "| `x_source` | str | `''` | `x` Choices: `''`, `cuda`. |"


@pytest.mark.parametrize("readme", sorted(ROOT.glob("roles/*/README.md")), ids=lambda p: p.parent.name)
def test_the_generated_tables_hold_no_raw_markup(readme):
    table = readme.read_text().split(role_docs.BEGIN, 1)[1].split(role_docs.END, 1)[0]
    assert RAW_MARKUP.findall(table) == []
