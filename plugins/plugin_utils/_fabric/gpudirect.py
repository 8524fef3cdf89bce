# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether GPUDirect RDMA is available where it is expected, from rdma_fabric_facts' ``gpudirect``: pure Python."""

METHODS = ("dmabuf", "peermem")


def gpudirect_problem(host, facts, expected):
    """One sentence when `host` should have GPUDirect RDMA and cannot; '' when it can, or when it is not expected.

    expected: validate_fabric_gpudirect (true, false, or a method of METHODS that must be the one in use). A host
    without HCAs has nothing to move GPU memory to, so it is never a problem.
    """
    if not expected or not facts.get("hcas"):
        return ""
    state = facts.get("gpudirect") or {}
    method = state.get("method")
    if expected is not True and expected not in METHODS:
        return ("%s: validate_fabric_gpudirect=%r is not true, false, dmabuf or peermem" % (host, expected))
    if method is None:
        return ("%s: GPUDirect RDMA is expected (validate_fabric_gpudirect) but unavailable: %s"
                % (host, state.get("reason") or "rdma_fabric_facts found no method"))
    if expected is not True and method != expected:
        return ("%s: GPUDirect RDMA through %s is expected (validate_fabric_gpudirect) but the host uses %s (kernel %s, %s "
                "kernel module); set validate_fabric_gpudirect: true to accept either method"
                % (host, expected, method, state.get("kernel_release"), state.get("kernel_module_flavor")))
    return ""
