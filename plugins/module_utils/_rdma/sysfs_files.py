# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading sysfs attribute files: a file that is absent or that the kernel refuses to read is None, never an error.

Some attributes exist but fail on read (an unused GID slot's gid_attrs/types/N answers EINVAL), so OSError of any kind
means "not reported"."""

import os


def read_text(path):
    """The file's text without surrounding whitespace; None when it is absent, unreadable or empty."""
    try:
        with open(path) as handle:
            text = handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def read_int(path, base=10):
    """The file's number (base 16 accepts a 0x prefix); None when absent or not a number."""
    text = read_text(path)
    try:
        return None if text is None else int(text, base)
    except ValueError:
        return None


def numbered_entries(directory):
    """The entries of `directory` whose names are numbers (port and GID indexes), as ints in numeric order."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


def entries(directory):
    """The entries of `directory` in name order; [] when it does not exist."""
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []
