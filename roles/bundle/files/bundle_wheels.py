#!/usr/bin/env python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Put the Python packages that hash-pinned requirement files name into an offline bundle, as a package index pip reads
(roles/bundle, run by playbooks/bundle.yml; the anaconda role installs Jupyter from such files).

A requirement file pins each package as pip's --require-hashes mode wants it (``name==version --hash=sha256:HEX ...``,
one hash per file of that release: a wheel per Python and platform). For each pinned package this reads the project's
page of a PEP 503 simple index (INDEX/<project>/, such as https://pypi.org/simple/), takes every file the page links
whose SHA-256 the pin lists, downloads it (from the older bundle where that holds it already) and checks its hash. It
writes BUNDLE/pypi/files/<file>, and BUNDLE/pypi/simple/ as a PEP 503 index of them, each link with its sha256: serve
BUNDLE over HTTP and point pip (anaconda_pip_index_url) at .../pypi/simple/. A pin of which the page links no file
stops it, naming the package, the version and the page (exit 1). Prints one JSON line: packages, files, bytes.

usage: bundle_wheels.py BUNDLE INDEX OLD_BUNDLE REQUIREMENTS...
"""
import hashlib
import html
import json
import os
import re
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request

LINK = re.compile(r"""<a\s[^>]*?href\s*=\s*["']([^"']+)["'][^>]*>""", re.IGNORECASE)
HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
TIMEOUT = 60


def project(name):
    """PEP 503's normalised name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text):
    """[(name, version, {sha256, ...})] of a hash-pinned requirement file (continuation lines joined)."""
    found = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([^\s;]+)", line)
        if match:
            found.append((match.group(1), match.group(2), set(HASH.findall(line))))
    return found


def links(page, base):
    """{sha256: (file name, absolute URL)} of the links of a simple index page that carry a sha256 fragment."""
    found = {}
    for href in LINK.findall(page):
        address, fragment = urllib.parse.urldefrag(urllib.parse.urljoin(base, html.unescape(href)))
        if fragment.startswith("sha256="):
            found[fragment[len("sha256="):].lower()] = (urllib.parse.unquote(address.rsplit("/", 1)[-1]), address)
    return found


def page(url):
    """A project's page of the index; empty where the index has no such project (404)."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as answer:
            return answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return ""
        raise SystemExit("bundle_wheels: %s answers %s %s" % (url, error.code, error.reason)) from error
    except OSError as error:  # urllib.error.URLError among them
        raise SystemExit("bundle_wheels: cannot read %s: %s (bundle_pip_index_url)" % (url, error)) from error


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(url, dest, sha256, old):
    """dest holds the file of that sha256: copied from the old bundle where it has it, else downloaded and checked."""
    kept = os.path.join(old, os.path.basename(dest))
    if os.path.isfile(kept) and sha256_of(kept) == sha256:
        shutil.copyfile(kept, dest)
        return
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as answer, open(dest + ".part", "wb") as out:
            shutil.copyfileobj(answer, out)
    except OSError as error:  # urllib.error.URLError among them
        raise SystemExit("bundle_wheels: cannot download %s: %s" % (url, error)) from error
    got = sha256_of(dest + ".part")
    if got != sha256:
        os.unlink(dest + ".part")
        raise SystemExit("bundle_wheels: %s has SHA-256 %s, the requirement pins %s: not taken" % (url, got, sha256))
    os.replace(dest + ".part", dest)


def write_page(path, title, entries):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    body = "".join('<a href="%s">%s</a><br>\n' % (html.escape(href), html.escape(text)) for href, text in entries)
    with open(path, "w") as out:
        out.write("<!DOCTYPE html>\n<html><head><title>%s</title></head><body>\n%s</body></html>\n"
                  % (html.escape(title), body))


def main(bundle, index, old_bundle, requirements):
    index = index.rstrip("/") + "/"
    files_dir, simple = os.path.join(bundle, "pypi", "files"), os.path.join(bundle, "pypi", "simple")
    os.makedirs(files_dir, exist_ok=True)
    taken, missing = {}, []
    for requirement in requirements:
        with open(requirement) as handle:
            for name, version, hashes in pins(handle.read()):
                page_url = index + project(name) + "/"
                offered = links(page(page_url), page_url)
                chosen = {sha: offered[sha] for sha in sorted(hashes) if sha in offered}
                if not chosen:
                    missing.append("%s==%s (%s, in %s)" % (name, version, page_url, os.path.basename(requirement)))
                for sha, (file_name, url) in chosen.items():
                    dest = os.path.join(files_dir, file_name)
                    if not os.path.exists(dest):
                        fetch(url, dest, sha, os.path.join(old_bundle, "pypi", "files"))
                    taken.setdefault(project(name), {})[file_name] = sha
    if missing:
        raise SystemExit("bundle_wheels: the index links no file with a pinned hash for %d package(s): %s. Point "
                         "bundle_pip_index_url at an index that has them (PyPI's is https://pypi.org/simple/)"
                         % (len(missing), "; ".join(missing)))
    for name, files in taken.items():
        write_page(os.path.join(simple, name, "index.html"), "Links for %s" % name,
                   [("../../files/%s#sha256=%s" % (urllib.parse.quote(f), sha), f) for f, sha in sorted(files.items())])
    write_page(os.path.join(simple, "index.html"), "Simple index", [(name + "/", name) for name in sorted(taken)])
    sizes = [os.path.getsize(os.path.join(files_dir, f)) for files in taken.values() for f in files]
    print(json.dumps({"packages": len(taken), "files": len(sizes), "bytes": sum(sizes)}))


if __name__ == "__main__":
    if len(sys.argv) < 5:
        raise SystemExit(__doc__.rsplit("usage: ", 1)[1])
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
