# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write the anaconda role's Jupyter lock files from a package index (a maintainer's tool; run on a host with PyPI).

    .venv/bin/python tests/harness/generate/jupyter_lock.py [--index-url URL] [--jupyterlab X] [--ipykernel Y]

Resolves jupyterlab==X with ipykernel==Y, and then ipykernel==Y alone within that set, with pip's resolver
(``pip install --dry-run --report``) for each Python the role supports (PYTHONS) on each architecture (PLATFORMS),
the oldest Python's choices binding the others, and
writes two pip requirements files with every wheel's SHA-256, for ``pip install --require-hashes``:

  roles/anaconda/files/jupyter/jupyterlab.lock   what the Jupyter server's virtual environment holds
  roles/anaconda/files/jupyter/ipykernel.lock    what goes into each conda environment for its kernel

A package some Pythons do not need carries a ``python_version`` marker. The site's pip configuration (extra indexes,
find-links, constraints) is left out so that only the index decides; its certificate setting is kept.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[3]
LOCK_DIR = ROOT / "roles" / "anaconda" / "files" / "jupyter"
PYTHONS = ("3.11", "3.12", "3.13")
PLATFORMS = {
    "x86_64": ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"),
    "aarch64": ("manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64", "linux_aarch64"),
}
JUPYTERLAB = "4.6.6"
IPYKERNEL = "7.4.0"


def normalized(name):
    return name.lower().replace("_", "-").replace(".", "-")


def resolve(requirements, python, platforms, index_url, constraints=None):
    """{name: (version, sha256)} that pip picks for ``requirements`` on that Python and platform."""
    abi = "cp" + python.replace(".", "")
    env = dict(os.environ, PIP_CONSTRAINT="", PIP_EXTRA_INDEX_URL="", PIP_FIND_LINKS="", PIP_NO_INPUT="1")
    with tempfile.TemporaryDirectory() as work:
        report = pathlib.Path(work) / "report.json"
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                "--report", str(report), "--only-binary=:all:", "--index-url", index_url,
                "--python-version", python, "--implementation", "cp", "--abi", abi, "--target", work + "/target"]
        for platform in platforms:
            argv += ["--platform", platform]
        if constraints:
            path = pathlib.Path(work) / "constraints.txt"
            path.write_text("".join("%s==%s\n" % (name, pin[0]) for name, pin in constraints.items()))
            argv += ["--constraint", str(path)]
        subprocess.run(argv + list(requirements), check=True, env=env)
        found = {}
        for item in json.loads(report.read_text())["install"]:
            archive = item["download_info"]["archive_info"]
            found[normalized(item["metadata"]["name"])] = (item["metadata"]["version"], archive["hashes"]["sha256"])
        return found


def lock_lines(resolutions):
    """Requirement lines from {(python, arch): {name: (version, sha256)}}: one version per package, every hash."""
    versions, hashes, pythons = {}, {}, {}
    for (python, _arch), found in resolutions.items():
        for name, (version, sha256) in found.items():
            if versions.setdefault(name, version) != version:
                sys.exit("%s resolves to %s and %s on different platforms: pin it" % (name, versions[name], version))
            hashes.setdefault(name, set()).add(sha256)
            pythons.setdefault(name, set()).add(python)
    lines = []
    for name in sorted(versions):
        marker = ""
        if pythons[name] != set(PYTHONS):
            marker = ' ; python_version in "%s"' % " ".join(sorted(pythons[name]))
        lines.append("%s==%s%s \\\n" % (name, versions[name], marker)
                     + " \\\n".join("    --hash=sha256:%s" % sha for sha in sorted(hashes[name])) + "\n")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--index-url", default="https://pypi.org/simple")
    parser.add_argument("--jupyterlab", default=JUPYTERLAB)
    parser.add_argument("--ipykernel", default=IPYKERNEL)
    parser.add_argument("--out", type=pathlib.Path, default=LOCK_DIR)
    args = parser.parse_args(argv)
    server, kernel, pins = {}, {}, {}
    # The oldest Python first: its choices bind the others, so that every Python gets the same versions.
    for python in PYTHONS:
        for arch, platforms in PLATFORMS.items():
            found = resolve(["jupyterlab==" + args.jupyterlab, "ipykernel==" + args.ipykernel], python, platforms,
                            args.index_url, constraints=pins)
            pins.update((name, pin) for name, pin in found.items() if name not in pins)
            server[(python, arch)] = found
            kernel[(python, arch)] = resolve(["ipykernel==" + args.ipykernel], python, platforms, args.index_url,
                                             constraints=found)
    header = ("# Generated by tests/harness/generate/jupyter_lock.py from %s for CPython %s on %s; do not edit.\n"
              % (args.index_url, ", ".join(PYTHONS), ", ".join(PLATFORMS)))
    args.out.mkdir(parents=True, exist_ok=True)
    for name, resolutions, top in (("jupyterlab.lock", server, "jupyterlab==%s ipykernel==%s"
                                    % (args.jupyterlab, args.ipykernel)),
                                   ("ipykernel.lock", kernel, "ipykernel==%s" % args.ipykernel)):
        text = header + "# Resolved: %s\n" % top + "".join(lock_lines(resolutions))
        (args.out / name).write_text(text)
        print("%s: %d packages" % (args.out / name, len(lock_lines(resolutions))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
