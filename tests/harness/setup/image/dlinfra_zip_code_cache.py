# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""In the test images only (build_image.sh): keep the code Python compiles from Ansible's module payloads.

Each task Ansible runs on a host brings its module and Ansible's module_utils in a new temporary zip, and Python
compiles their source again every time: a zip has no __pycache__. On the test machines that compile is about a seventh
of the CPU a task costs, and make test runs tens of thousands of tasks. This keeps the compiled code under
/var/cache/dlinfra-zip-code, keyed by the interpreter and the source's SHA-256, and gives it the path of the zip it
comes from this time. What runs is what the source says; only the compile is skipped. Loaded at start-up by
dlinfra-zip-code-cache.pth; it touches nothing but source zipimport compiles from a path with an ansible package.
"""
import hashlib
import marshal
import os
import sys
import zipimport

CACHE = "/var/cache/dlinfra-zip-code"
COMPILE = zipimport._compile_source  # pylint: disable=protected-access


def with_filename(code, filename):
    """code and the code objects nested in it, as compiled from filename."""
    consts = tuple(with_filename(c, filename) if isinstance(c, type(code)) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def cached_compile(pathname, source):
    """zipimport's _compile_source, through the cache for Ansible's payloads."""
    if "/ansible/" not in pathname and "/ansible_collections/" not in pathname:
        return COMPILE(pathname, source)
    key = hashlib.sha256(sys.implementation.cache_tag.encode() + b"\0" + source).hexdigest()
    path = os.path.join(CACHE, key)
    try:
        with open(path, "rb") as cached:
            return with_filename(marshal.load(cached), pathname)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = COMPILE(pathname, source)
    partial = "%s.%d" % (path, os.getpid())
    try:
        os.makedirs(CACHE, exist_ok=True)
        with open(partial, "wb") as out:
            marshal.dump(code, out)
        os.replace(partial, path)  # whole or not at all: another task may read it now
    except OSError:
        pass
    return code


zipimport._compile_source = cached_compile  # pylint: disable=protected-access
