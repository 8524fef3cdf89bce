#!/usr/bin/env bash
# What the collection reads from a machine's real NVIDIA GPUs, with the local connection: nvidia_gpu_facts,
# the driver plan, validate and the gpu_monitoring collector, idle and then while a GPU computes. Run as root
# on a GPU machine, from a clone, with ansible-core importable by python3. Read-only on the GPUs.
#   tests/harness/device/gpu_device_check.sh OUTDIR
set -u -o pipefail
out=${1:?usage: gpu_device_check.sh OUTDIR}
cd "$(dirname "$0")/../../.."
mkdir -p "$out"
inventory=tests/fixtures/gpu_device_hosts.yml
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_NOCOLOR=1 PYTHONPATH=$PWD/collections${PYTHONPATH:+:$PYTHONPATH}

step() { echo "== $1" >&2; shift; "$@"; echo "== rc=$?" >&2; }
facts() {
  timeout 120 ansible all -i "$inventory" -m dlinfra.gpu_cluster.nvidia_gpu_facts 2>&1 | sed '1s/^[^{]*//'
}
collector() {
  timeout 60 python3 -c 'import sys; from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.gpu_metrics import main
sys.exit(main(sys.argv[1:]))' --textfile-directory - --kernel-log /dev/kmsg --state-file /tmp/xid-state.json
}

{
  step "nvidia-smi" timeout 60 nvidia-smi
  nvidia-smi -q -x >"$out/nvidia-smi-q.xml"
  cat /proc/driver/nvidia/version
  step "nvidia_gpu_facts" facts >"$out/nvidia_gpu_facts.json"
  step "nvidia_driver plan (check mode, preflight only)" timeout 300 ansible-playbook -i "$inventory" --check \
    --tags dlinfra_none tests/harness/device/gpu_device_driver_plan.yml
  step "validate" timeout 300 ansible-playbook -i "$inventory" playbooks/validate.yml \
    -e validate_report_dir="$out/validate" -e '{"validate_fail_on_error": false, "validate_k8s_gpu_job": false}'
  # Read-only: the fabric as sysfs shows it, and MIG's profile table and the placement syntax of -cgi (issue 53's
  # plan writes ID:START), without changing the MIG mode.
  step "rdma_fabric_facts" timeout 120 ansible all -i "$inventory" -m dlinfra.gpu_cluster.rdma_fabric_facts \
    >"$out/rdma_fabric_facts.json"
  step "MIG profiles" timeout 60 nvidia-smi mig -lgip >"$out/mig-lgip.txt"
  step "MIG placements" timeout 60 nvidia-smi mig -lgipp >"$out/mig-lgipp.txt"
  step "MIG help" timeout 60 nvidia-smi mig -h >"$out/mig-help.txt"
  step "collector, idle" collector >"$out/metrics-idle.prom"
  TIMEFORMAT="collector: %R s wall, %U s user, %S s system"
  for _ in 1 2 3; do time collector >/dev/null; done
  python3 -c 'import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 25
while time.time() < end:
    a @ a
torch.cuda.synchronize()' &
  sleep 12
  step "collector, busy" collector >"$out/metrics-busy.prom"
  step "nvidia_gpu_facts, busy" facts >"$out/nvidia_gpu_facts-busy.json"
  wait
} 2>&1 | tee "$out/log.txt"
