# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inputs digest of converged_state: what a role's state on a node depends on, folded into one sha256.

A role's record on a node counts only while the digest is the same, so the digest takes in everything the role's full
run reads on the controller: the role's public variables (ROLE_*), the facts of the platform it picks settings by, the
values the role passes itself (the GPUs a node holds), the role's own files and the collection's version. A change to
any of them makes the next run a full one.
"""

import hashlib
import json
import os

FACTS = ("distribution", "distribution_version", "kernel", "architecture")
ROLE_FOLDERS = ("defaults", "files", "handlers", "meta", "tasks", "templates", "vars")


def role_variables(names, role):
    """The names of the role's public variables among NAMES (ROLE_x; internal __ROLE_x ones are the role's own)."""
    return sorted(name for name in names if name.startswith(role + "_"))


def role_files_digest(role_path):
    """sha256 over the role's files, each as its path under the role and its content, in a fixed order."""
    digest = hashlib.sha256()
    for folder in ROLE_FOLDERS:
        for directory, subdirectories, files in sorted(os.walk(os.path.join(role_path, folder))):
            subdirectories.sort()
            for name in sorted(files):
                path = os.path.join(directory, name)
                digest.update(os.path.relpath(path, role_path).encode() + b"\0")
                with open(path, "rb") as handle:
                    digest.update(handle.read())
                digest.update(b"\0")
    return digest.hexdigest()


def collection_version(role_path):
    """The version in the collection's MANIFEST.json (installed) or galaxy.yml (a checkout); '' where neither is."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(role_path)))
    try:
        with open(os.path.join(root, "MANIFEST.json")) as handle:
            return str(json.load(handle)["collection_info"]["version"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        with open(os.path.join(root, "galaxy.yml")) as handle:
            for line in handle:
                if line.startswith("version:"):
                    return line.split(":", 1)[1].strip().strip("'\"")
    except OSError:
        pass
    return ""


def inputs_digest(variables, facts, inputs, files_digest, version):
    """One sha256 of the role's variables, the platform facts, the role's own inputs, its files and the version."""
    document = {"variables": variables, "facts": {name: facts.get(name) for name in FACTS}, "inputs": inputs,
                "role_files": files_digest, "collection_version": version}
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()
