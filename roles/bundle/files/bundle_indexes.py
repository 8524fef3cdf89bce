#!/usr/bin/env python
# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make each suite of an offline bundle's archives whole: the InRelease its cached indexes belong to, and every package
index a node will ask for (roles/bundle, run by playbooks/bundle.yml).

apt on a node reads dists/SUITE/InRelease, then each index by the SHA-256 it lists (by-hash). What apt-cacher-ng cached
falls short of that in two ways:
- it keeps earlier versions of a suite's InRelease beside it (InRelease.<unix time>), and the current one may be newer
  than the indexes it cached, or missing: for each directory under BUNDLE with an InRelease (an archive's
  dists/SUITE, or a flat repository) this keeps as InRelease the newest version whose listed indexes cover those the
  cache holds, and removes the others (exit 1, naming the directory, where none does);
- a node whose lists were fresh fetched no index, or only the differences (pdiff): the Packages index of each component
  the InRelease names and each architecture the bundle holds, and the English translations, are fetched through the
  proxy (PROXY/ARCHIVE/dists/SUITE/..., by hash, checked) where the bundle lacks them.

usage: bundle_indexes.py BUNDLE PROXY     (PROXY: the apt-cacher-ng it was collected from, e.g. http://127.0.0.1:3142)
"""
import hashlib
import os
import re
import sys
import urllib.request

ENTRY = re.compile(r"^ ([0-9a-f]{64}) +\d+ (\S+)$")


def listed_sha256(text):
    """{path: sha256} of the SHA256 section of a Release or InRelease file."""
    listed, section = {}, None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line.rstrip(":")
            continue
        match = ENTRY.match(line)
        if match and section == "SHA256":
            listed[match.group(2)] = match.group(1)
    return listed


def index_dirs(suite_dir):
    """The directories (relative to the suite) whose by-hash/SHA256 holds cached indexes."""
    found = set()
    for root, dirs, files in os.walk(suite_dir):
        if root.endswith(os.path.join("by-hash", "SHA256")) and files:
            found.add(os.path.relpath(os.path.dirname(os.path.dirname(root)), suite_dir))
    return found


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def covers(suite_dir, listed, needed):
    """Every directory in needed has an index the release lists, by its hash, in the bundle. A flat repository (no
    by-hash directories) has its indexes beside the release: each of them must be the one listed."""
    if not needed and os.path.basename(os.path.dirname(suite_dir)) != "dists":
        present = [path for path in listed if os.path.isfile(os.path.join(suite_dir, path))]
        return bool(present) and all(file_sha256(os.path.join(suite_dir, path)) == listed[path] for path in present)
    for directory in needed:
        hashes = [sha for path, sha in listed.items() if os.path.dirname(path) == directory]
        if not any(os.path.exists(os.path.join(suite_dir, directory, "by-hash", "SHA256", sha)) for sha in hashes):
            return False
    return True


def field(text, name):
    match = re.search(r"^%s: *(.*)$" % name, text, re.MULTILINE)
    return match.group(1).split() if match else []


def wanted_indexes(text, archs):
    """The index paths (relative to the suite) a node asks for: each component's Packages for each architecture, and
    its English translations, in the first compression the release lists."""
    listed = listed_sha256(text)
    wanted = []
    for component in field(text, "Components"):
        for base in ["%s/binary-%s/Packages" % (component, arch) for arch in sorted(archs)] + ["%s/i18n/Translation-en" % component]:
            for suffix in (".xz", ".gz", ".bz2", ""):
                if base + suffix in listed:
                    wanted.append((base + suffix, listed[base + suffix]))
                    break
    return wanted


def complete(suite_dir, archive_url, archs):
    """Fetch, by hash through the proxy, each index a node will ask for that the suite lacks; their count."""
    with open(os.path.join(suite_dir, "InRelease"), errors="replace") as handle:
        text = handle.read()
    fetched = 0
    for path, sha in wanted_indexes(text, archs):
        target = os.path.join(suite_dir, os.path.dirname(path), "by-hash", "SHA256", sha)
        if os.path.exists(target):
            continue
        url = "%s/dists/%s/%s/by-hash/SHA256/%s" % (archive_url, os.path.basename(suite_dir), os.path.dirname(path), sha)
        with urllib.request.urlopen(url, timeout=120) as response:
            data = response.read()
        if hashlib.sha256(data).hexdigest() != sha:
            raise SystemExit("bundle: %s does not have the SHA-256 its InRelease lists" % url)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target + ".part", "wb") as out:
            out.write(data)
        os.replace(target + ".part", target)
        fetched += 1
    return fetched


def settle(suite_dir):
    names = [n for n in os.listdir(suite_dir) if n == "InRelease" or re.match(r"^InRelease\.\d+$", n)]
    if not names:
        return None
    # The current one first, then the earlier versions, newest first.
    names.sort(key=lambda n: (n == "InRelease", int(n.split(".")[1]) if "." in n else 0), reverse=True)
    needed = index_dirs(suite_dir)
    for name in names:
        with open(os.path.join(suite_dir, name), errors="replace") as handle:
            listed = listed_sha256(handle.read())
        if covers(suite_dir, listed, needed):
            if name != "InRelease":
                os.replace(os.path.join(suite_dir, name), os.path.join(suite_dir, "InRelease"))
            for other in names:
                if other != name and other != "InRelease":
                    os.unlink(os.path.join(suite_dir, other))
            return name
    raise SystemExit("bundle: no InRelease of %s lists the indexes the cache holds (%s): converge once more through "
                     "the proxy, then build the bundle again" % (suite_dir, ", ".join(sorted(needed))))


# The archives' places in a bundle (apt-cacher-ng's remapped names, roles/bundle), which are also their paths on
# the proxy.
ARCHIVES = ("debian", "debian-security", "ubuntu")


def main(bundle, proxy=None):
    for root, dirs, files in os.walk(bundle):
        if not any(name == "InRelease" or re.match(r"^InRelease\.\d+$", name) for name in files):
            continue
        chosen = settle(root)
        archive = os.path.relpath(root, bundle).split(os.sep)[0]
        fetched = 0
        if os.path.basename(os.path.dirname(root)) == "dists" and archive in ARCHIVES and proxy:
            top = os.path.join(bundle, archive)
            archs = {d[len("binary-"):] for walked in os.walk(top) for d in walked[1] if d.startswith("binary-")}
            fetched = complete(root, "%s/%s" % (proxy.rstrip("/"), archive), archs)
        print("%s: %s kept as InRelease, %d index(es) fetched" % (os.path.relpath(root, bundle), chosen, fetched))
        dirs[:] = [d for d in dirs if d != "by-hash"]


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
