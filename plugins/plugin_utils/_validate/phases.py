# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which of validate's phases a run read, and what the report says about the checks of a phase it did not read.

Each phase of the validate role has its tag (validate_gpu, validate_runtime, validate_nccl, validate_storage,
validate_datasets, validate_kubernetes, validate_monitoring, validate_security, validate_training, validate_fabric), and
`validate.yml --tags validate_gpu` reads the GPUs only. The role then
tells the evaluator, per node, which phases it read (__validate_raw's `read`); the checks of the other phases stay in
the report, every check of a node being present, as skipped with the reason, rather than failing on data that nobody
asked for.
"""

PHASES = ("validate_gpu", "validate_runtime", "validate_nccl", "validate_storage", "validate_datasets",
          "validate_kubernetes", "validate_monitoring", "validate_security", "validate_training", "validate_fabric")
# A check's name starts with its group; the group says which phase read its data.
_PHASE_OF_GROUP = {"gpu": "validate_gpu", "runtime": "validate_runtime", "nccl": "validate_nccl",
                   "storage": "validate_storage", "dataset": "validate_datasets", "k8s": "validate_kubernetes",
                   "monitoring": "validate_monitoring", "security": "validate_security", "training": "validate_training",
                   "fabric": "validate_fabric"}


def phase_of(check_name):
    """The phase whose reads a check evaluates (`gpu.ecc` -> validate_gpu), None for node.reachable."""
    return _PHASE_OF_GROUP.get(check_name.split(".", 1)[0])


def not_read_reason(phase):
    return "not read in this run: the tags given (--tags) left out %s" % phase


def unread(raw):
    """The phases a node's raw data says were not read; none for raw data without `read` (every phase was read)."""
    read = (raw or {}).get("read")
    if read is None:
        return set()
    return {phase for phase in PHASES if not read.get(phase, False)}


def mark_unread(report, nodes):
    """The report with the checks and measurements of each node's unread phases as skipped; changed in place."""
    for item in report["checks"]:
        phase = phase_of(item["check"])
        if phase and phase in unread(nodes.get(item["node"])):
            item.update(status="skip", expected=None, measured=None, message=not_read_reason(phase))
    nccl_unread = {host for host, raw in nodes.items() if "validate_nccl" in unread(raw)}
    for entry in report["measurements"]["nccl_busbw"]:
        if entry["name"] in nccl_unread or (entry["scope"] == "cluster" and nccl_unread):
            entry.update(status="skip", busbw_gbps=None, reason=not_read_reason("validate_nccl"))
    return report
