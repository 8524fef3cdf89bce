"""Keep every role's meta/argument_specs.yml, defaults/main.yml and README variable table in step.

  role_docs.py           check: every default is specified (and vice versa), specified defaults equal the
                         real ones, and each README's table is what the specs generate; exit 1 otherwise
  role_docs.py --write   regenerate the README tables from the specs
"""
import pathlib
import re
import sys

import yaml
from antsibull_docs_parser import parser
from antsibull_docs_parser.format import Formatter, format_paragraphs

ROOT = pathlib.Path(__file__).resolve().parents[3]
BEGIN, END = "<!-- BEGIN VARIABLES (generated from meta/argument_specs.yml) -->", "<!-- END VARIABLES -->"


def code(text):
    """A Markdown code span; one that holds backticks is fenced with more of them. An empty string shows as ''."""
    text = str(text)
    if text == "":
        return "`''`"
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text[0] == "`" or text[-1] == "`" else ""
    return fence + pad + text + pad + fence


class MarkdownCell(Formatter):
    """Ansible's documentation markup (C(), I(), B(), V(), O(), RV(), E(), M(), P(), U(), L(), R(), HORIZONTALLINE)
    as the Markdown a README table cell holds: code spans, emphasis and links, no HTML and no escaped punctuation."""

    def format_error(self, part):
        raise ValueError(part.message)

    def format_bold(self, part):
        return "**%s**" % part.text

    def format_code(self, part):
        return code(part.text)

    def format_horizontal_line(self, part):
        return " "

    def format_italic(self, part):
        return "*%s*" % part.text

    def format_link(self, part):
        return "[%s](%s)" % (part.text, part.url)

    def format_module(self, part, url):
        return code(part.fqcn)

    def format_rst_ref(self, part):
        return part.text

    def format_url(self, part):
        return "<%s>" % part.url

    def format_text(self, part):
        return part.text

    def format_env_variable(self, part):
        return code(part.name)

    def format_option_name(self, part, url):
        return code(part.name if part.value is None else "%s=%s" % (part.name, part.value))

    def format_option_value(self, part):
        return code(part.value)

    def format_plugin(self, part, url):
        return code(part.plugin.fqcn)

    def format_return_value(self, part, url):
        return code(part.name if part.value is None else "%s=%s" % (part.name, part.value))


def markup(text):
    """A description (a string or a list of paragraphs) with its Ansible markup rendered to Markdown, on one line."""
    paragraphs = parser.parse(text, parser.Context(), errors="exception")
    return format_paragraphs(paragraphs, MarkdownCell(), par_sep=" ").strip()


def load(path):
    return yaml.safe_load(path.read_text()) if path.exists() else None


def type_of(spec):
    kind = spec.get("type", "str")
    return "%s of %s" % (kind, spec["elements"]) if "elements" in spec else kind


def cell(value):
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(options):
    rows = ["| Variable | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for name in sorted(options):
        spec = options[name]
        description = markup(spec.get("description", ""))
        shown = yaml.safe_dump(spec.get("default"), default_flow_style=True, width=10**6).strip().removesuffix("\n...")
        default = "(required)" if spec.get("required") else code(shown)
        if "choices" in spec:
            description += " Choices: %s." % ", ".join(code(c) for c in spec["choices"])
        rows.append("| `%s` | %s | %s | %s |" % (name, type_of(spec), cell(default), cell(description)))
    return "\n".join(rows)


def check_role(role, write):
    problems = []
    specs = load(role / "meta" / "argument_specs.yml")
    if not specs:
        return ["%s: meta/argument_specs.yml is missing" % role.name]
    entries = specs["argument_specs"]
    # main, or the one entry of a role that only defines values (gpu_cluster: no task validates them where it is a dependency)
    options = (entries.get("main") or next(iter(entries.values()))).get("options", {})
    defaults = load(role / "defaults" / "main.yml") or {}
    for name in sorted(set(defaults) - set(options)):
        problems.append("%s: defaults/main.yml sets %s, which meta/argument_specs.yml does not describe" % (role.name, name))
    for name in sorted(set(options) - set(defaults)):
        if not options[name].get("required"):
            problems.append("%s: %s is in meta/argument_specs.yml but has no value in defaults/main.yml" % (role.name, name))
    for name in sorted(set(options) & set(defaults)):
        if "default" not in options[name]:
            problems.append("%s: %s has no default in meta/argument_specs.yml (defaults/main.yml has %r)" % (role.name, name, defaults[name]))
        elif options[name]["default"] != defaults[name]:
            problems.append("%s: %s defaults to %r in defaults/main.yml but %r in meta/argument_specs.yml"
                            % (role.name, name, defaults[name], options[name]["default"]))
    readme = role / "README.md"
    if not readme.exists():
        return problems + ["%s: README.md is missing" % role.name]
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        return problems + ["%s: README.md has no generated variable table (markers %s ... %s)" % (role.name, BEGIN, END)]
    head, rest = text.split(BEGIN, 1)
    body, tail = rest.split(END, 1)
    wanted = "\n" + table(options) + "\n"
    if body != wanted:
        if write:
            readme.write_text(head + BEGIN + wanted + END + tail)
        else:
            problems.append("%s: README.md's variable table is stale; run: .venv/bin/python tests/harness/generate/role_docs.py --write" % role.name)
    return problems


def main():
    write = "--write" in sys.argv[1:]
    roles = sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())
    problems = [p for role in roles for p in check_role(role, write)]
    for problem in problems:
        print(problem)
    print("role_docs: %d role(s), %d problem(s)" % (len(roles), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
