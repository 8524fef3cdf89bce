# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""build_images.sh on a machine without debootstrap (a fresh machine's first `make demo`): both image builds run in
parallel, so debootstrap must be installed once before them. The real scripts run against stand-in commands: an
apt-get that, like dpkg, refuses a second install while one holds the lock; docker, debootstrap and chroot that only
record what they were asked."""

import os
import pathlib
import stat
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[3]

APT_GET = """#!/bin/sh
echo "apt-get $*" >>"$CALLS"
mkdir "$FAKE/dpkg.lock" 2>/dev/null || { echo "E: Could not get lock /var/lib/dpkg/lock-frontend" >&2; exit 100; }
sleep 1
printf '#!/bin/sh\\necho "debootstrap $*" >>"$CALLS"\\nmkdir -p "$4/etc" "$4/usr/lib/python3.11"\\n' >"$FAKE/bin/debootstrap"
chmod +x "$FAKE/bin/debootstrap"
rmdir "$FAKE/dpkg.lock"
"""
DOCKER = """#!/bin/sh
echo "docker $*" >>"$CALLS"
case "$1 $2" in
  "image inspect") exit 1 ;;
  "import "*) cat >/dev/null ;;
esac
"""
ID = """#!/bin/sh
[ "$1" = -u ] && echo 0 || /usr/bin/id "$@"
"""


def fake(directory, name, text):
    path = directory / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_a_machine_without_debootstrap_builds_both_images_first_time(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "apt-get", APT_GET)
    fake(bin_dir, "docker", DOCKER)
    fake(bin_dir, "chroot", "#!/bin/sh\nexit 0\n")
    fake(bin_dir, "id", ID)
    calls = tmp_path / "calls"
    env = dict(os.environ, PATH="%s:/usr/bin:/bin" % bin_dir, FAKE=str(tmp_path), CALLS=str(calls), TMPDIR=str(tmp_path))
    result = subprocess.run([str(ROOT / "tests/harness/setup/build_images.sh")], env=env, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    recorded = calls.read_text().splitlines()
    assert [line for line in recorded if line.startswith("apt-get")] == [
        "apt-get -o DPkg::Lock::Timeout=300 install -y -q debootstrap"]
    assert sorted(line.split()[3] for line in recorded if line.startswith("debootstrap")) == ["bookworm", "trixie"]
    assert len([line for line in recorded if line.startswith("docker import")]) == 2
