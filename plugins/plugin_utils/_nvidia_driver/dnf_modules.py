# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What dnf must run so that one stream of a module is the enabled one (EL 8 and 9 modularity).

NVIDIA's CUDA repository for EL 8/9 ships the driver as the ``nvidia-driver`` module: one stream per branch and flavour
(``580-open``, ``580-dkms``). Its packages are hidden from dnf until their stream is enabled, and dnf enables only one
stream of a module at a time: moving to another needs a reset first.
"""


def enabled_streams(listing, module):
    """The streams of ``module`` that ``dnf module list --enabled MODULE`` lists (its stdout), in order."""
    streams = []
    for line in (listing or "").splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == module and fields[1] not in streams:
            streams.append(fields[1])
    return streams


def module_stream_commands(listing, module, stream):
    """The dnf commands (argv lists) that leave ``stream`` the one enabled stream of ``module``, given what
    ``dnf module list --enabled`` printed: none where it already is, an enable where no stream is, else a reset and an
    enable."""
    if not module or not stream:
        raise ValueError("a module and a stream are needed, got %r and %r" % (module, stream))
    enabled = enabled_streams(listing, module)
    enable = ["dnf", "module", "enable", "--assumeyes", "%s:%s" % (module, stream)]
    if enabled == [stream]:
        return []
    if not enabled:
        return [enable]
    return [["dnf", "module", "reset", "--assumeyes", module], enable]
