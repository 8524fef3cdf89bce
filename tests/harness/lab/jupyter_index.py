# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lay out the wheels of the anaconda role's Jupyter lock files as a PEP 503 simple index, for hosts without PyPI.

    .venv/bin/python tests/harness/lab/jupyter_index.py OUT [--python-version 3.13 ...] [--arch x86_64 ...]

Downloads (on this host, which reaches PyPI) the wheels that roles/anaconda/files/jupyter/*.lock pin for each given
CPython and architecture, checked against the locks' hashes (``pip download --require-hashes``), into a cache outside
the clone (CACHE_ROOT/<digest of the lock files>), and writes OUT/simple/<project>/index.html (one per normalised
project name, each link carrying the file's sha256) and OUT/files/<wheel>. Serve OUT over HTTP and point
anaconda_pip_index_url at <base>/simple/. Prints OUT/simple's path.
"""

import argparse
import hashlib
import html
import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
LOCKS = sorted((ROOT / "roles" / "anaconda" / "files" / "jupyter").glob("*.lock"))
CACHE_ROOT = pathlib.Path(os.environ.get("DLINFRA_CACHE", "/root/.cache/dlinfra-gpu-cluster")) / "jupyter-wheels"
PLATFORMS = {
    "x86_64": ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"),
    "aarch64": ("manylinux_2_28_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64", "linux_aarch64"),
}


def project_of(wheel):
    """The normalised project name (PEP 503) of a wheel's file name."""
    return re.sub(r"[-_.]+", "-", wheel.split("-", 1)[0]).lower()


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def lock_digest(locks):
    digest = hashlib.sha256()
    for lock in locks:
        digest.update(lock.name.encode() + b"\0" + lock.read_bytes())
    return digest.hexdigest()[:16]


def download(cache, python, arch):
    """The lock files' wheels for one CPython and architecture, into ``cache``; pip skips those already there."""
    env = dict(os.environ, PIP_CONSTRAINT="", PIP_EXTRA_INDEX_URL="", PIP_FIND_LINKS="", PIP_NO_INPUT="1")
    for lock in LOCKS:
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--require-hashes", "--no-deps",
                "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
                "--abi", "cp" + python.replace(".", ""), "-d", str(cache), "-r", str(lock)]
        for platform in PLATFORMS[arch]:
            argv += ["--platform", platform]
        subprocess.run(argv, check=True, env=env)


def write_index(cache, out):
    """OUT/files/<wheel> and OUT/simple/<project>/index.html for every wheel in ``cache``."""
    files, simple = out / "files", out / "simple"
    for path in (files, simple):
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
    projects = {}
    for wheel in sorted(cache.glob("*.whl")):
        shutil.copyfile(wheel, files / wheel.name)
        projects.setdefault(project_of(wheel.name), []).append((wheel.name, sha256_of(wheel)))
    for project, wheels in sorted(projects.items()):
        (simple / project).mkdir()
        links = "".join('<a href="../../files/%s#sha256=%s">%s</a><br>\n' % (html.escape(name), sha, html.escape(name))
                        for name, sha in wheels)
        (simple / project / "index.html").write_text(
            "<!DOCTYPE html>\n<html><body>\n%s</body></html>\n" % links)
    (simple / "index.html").write_text(
        "<!DOCTYPE html>\n<html><body>\n%s</body></html>\n"
        % "".join('<a href="%s/">%s</a><br>\n' % (project, project) for project in sorted(projects)))
    return len(projects)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--python-version", action="append", dest="pythons",
                        help="CPython X.Y of the nodes (repeatable; default 3.13, Debian 13's)")
    parser.add_argument("--arch", action="append", dest="archs", choices=sorted(PLATFORMS),
                        help="architecture of the nodes (repeatable; default x86_64)")
    args = parser.parse_args(argv)
    pythons, archs = args.pythons or ["3.13"], args.archs or ["x86_64"]
    cache = CACHE_ROOT / lock_digest(LOCKS)
    cache.mkdir(parents=True, exist_ok=True)
    done = cache / ".done"
    wanted = sorted("%s-%s" % (python, arch) for python in pythons for arch in archs)
    have = done.read_text().split() if done.exists() else []
    for key in wanted:
        if key not in have:
            python, arch = key.split("-", 1)
            download(cache, python, arch)
            have.append(key)
            done.write_text("\n".join(sorted(have)) + "\n")
    count = write_index(cache, args.out)
    print("%s/simple (%d projects, CPython %s on %s, from %s)"
          % (args.out, count, ", ".join(pythons), ", ".join(archs), cache), file=sys.stderr)
    print(args.out / "simple")
    return 0


if __name__ == "__main__":
    sys.exit(main())
