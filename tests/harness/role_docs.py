"""Keep every role's meta/argument_specs.yml, defaults/main.yml and README variable table in step.

  role_docs.py           check: every default is specified (and vice versa), specified defaults equal the
                         real ones, and each README's table is what the specs generate; exit 1 otherwise
  role_docs.py --write   regenerate the README tables from the specs
"""
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- BEGIN VARIABLES (generated from meta/argument_specs.yml) -->", "<!-- END VARIABLES -->"


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
        description = spec.get("description", "")
        if isinstance(description, list):
            description = " ".join(description)
        shown = yaml.safe_dump(spec.get("default"), default_flow_style=True, width=10**6).strip().removesuffix("\n...")
        default = "(required)" if spec.get("required") else "`%s`" % shown
        if "choices" in spec:
            description += " Choices: %s." % ", ".join("`%s`" % c for c in spec["choices"])
        rows.append("| `%s` | %s | %s | %s |" % (name, type_of(spec), cell(default), cell(description)))
    return "\n".join(rows)


def check_role(role, write):
    problems = []
    specs = load(role / "meta" / "argument_specs.yml")
    if not specs:
        return ["%s: meta/argument_specs.yml is missing" % role.name]
    options = specs["argument_specs"]["main"].get("options", {})
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
            problems.append("%s: README.md's variable table is stale; run: .venv/bin/python tests/harness/role_docs.py --write" % role.name)
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
