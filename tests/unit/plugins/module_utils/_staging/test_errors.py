# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine's error kinds and describe(), which turns what went wrong with one attempt into the reason a user reads."""

import errno
import socket

import pytest

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.errors import (
    ChecksumError, LocalError, PermanentError, StagingError, TransientError, describe)


@pytest.mark.parametrize("exc, reason", [
    (TransientError("HTTP 503 Service Unavailable"), "HTTP 503 Service Unavailable"),
    (TimeoutError(), "timed out"),
    (socket.timeout(), "timed out"),
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), "Connection refused"),
    (ValueError("bad value"), "ValueError: bad value"),
    (KeyError(), "KeyError"),
])
def test_describe_says_what_went_wrong_in_a_few_words(exc, reason):
    assert describe(exc) == reason


def test_the_kinds_stay_apart():
    # The transfer loop retries TransientError and plain OSError, gives up at once on PermanentError and LocalError,
    # and counts ChecksumError: none of them may be caught as another.
    kinds = (StagingError, TransientError, PermanentError, ChecksumError, LocalError)
    for kind in kinds:
        assert [other for other in kinds if issubclass(kind, other)] == [kind]
        assert not issubclass(kind, OSError)
