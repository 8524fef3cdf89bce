# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures that tests in several folders of tests/unit share (pytest collects without packages: a conftest.py here is
seen by every test below it)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENSURE_PROMTOOL = ROOT / "tests" / "harness" / "setup" / "ensure_promtool.sh"


@pytest.fixture(scope="session")
def promtool():
    """Prometheus' promtool: $PROMTOOL, .cache/promtool/bin/promtool or promtool on PATH, else what
    tests/harness/setup/ensure_promtool.sh unpacks from Debian's `prometheus` package (~2.5 s). Asked for when a test
    runs, not decided at collection, so a fresh clone fetches it before its first use. A test that needs it gets it or
    fails saying why; it never skips."""
    for candidate in (os.environ.get("PROMTOOL"), str(ROOT / ".cache" / "promtool" / "bin" / "promtool"),
                      shutil.which("promtool")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    completed = subprocess.run(["bash", str(ENSURE_PROMTOOL)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=300, check=False)
    path = completed.stdout.strip().splitlines()[-1] if completed.stdout.strip() else ""
    if completed.returncode != 0 or not os.access(path, os.X_OK):
        pytest.fail("no promtool: %s exited with %d (%s); set PROMTOOL to a promtool binary, or install Debian's "
                    "prometheus package" % (ENSURE_PROMTOOL.relative_to(ROOT), completed.returncode,
                                            completed.stderr.strip() or "no message"))
    return path
