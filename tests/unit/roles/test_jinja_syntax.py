# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every Jinja expression in the roles and playbooks parses: a syntax error (an apostrophe inside a single-quoted
Jinja string, an unclosed bracket) otherwise shows only when a host reaches that task."""

import pathlib

import jinja2
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
FILES = sorted(list(ROOT.glob("roles/*/*/*.yml")) + list(ROOT.glob("playbooks/*.yml")) + [ROOT / "site.yml"])
ENVIRONMENT = jinja2.Environment(extensions=["jinja2.ext.do", "jinja2.ext.loopcontrols"])


class _AnyTagLoader(yaml.SafeLoader):
    """Ansible YAML (!unsafe, !vault) read as plain data."""


_AnyTagLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def strings(node):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from strings(key)
            yield from strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item)
    elif isinstance(node, str) and ("{{" in node or "{%" in node):
        yield node


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Jinja's lexer on regex escapes such as '\\.'
@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_jinja_expression_parses(path):
    errors = []
    data = yaml.load(path.read_text(), Loader=_AnyTagLoader)  # noqa: S506 (a SafeLoader)
    for text in strings(data):
        try:
            ENVIRONMENT.parse(text)
        except jinja2.TemplateSyntaxError as error:
            errors.append("%s: %s" % (error.message, text.strip()[:200]))
    assert errors == []
