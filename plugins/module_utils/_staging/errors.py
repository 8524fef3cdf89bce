# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The errors of the shard engine: StagingError, raised before anything is changed, and the kinds of per-shard failure
that decide whether a transfer is retried."""


class StagingError(Exception):
    """Raised before anything is changed: bad input, unusable dest, too little space, dest locked."""


class TransientError(Exception):
    """Worth retrying after a backoff: 5xx, connection trouble, a truncated body."""


class PermanentError(Exception):
    """Retrying cannot help: 4xx, a missing source file, too many redirects."""


class ChecksumError(Exception):
    """The bytes received are not the shard that was asked for (size or sha256)."""


class LocalError(Exception):
    """Writing to dest failed (disk full, I/O error); retrying the source cannot help."""


def describe(exc):
    if isinstance(exc, TransientError):
        return str(exc)
    if isinstance(exc, TimeoutError) or type(exc).__name__ == "timeout":
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return "%s: %s" % (type(exc).__name__, exc) if str(exc) else type(exc).__name__
