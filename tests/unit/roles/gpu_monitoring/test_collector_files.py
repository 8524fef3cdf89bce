# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collector on the node: its script carries every collection module it imports (and no other) and runs them, and
it reads the staging index where shard_staging writes it by default."""

from __future__ import annotations

import hashlib
import pathlib
import subprocess
import sys

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils.staging_metrics import DEFAULT_INDEX
from role_vars import MODULE_UTILS, defaults, imported_closure, load, trust

ROOT = pathlib.Path(__file__).resolve().parents[4]


ROLE = ROOT / "roles" / "gpu_monitoring"
NVIDIA_SMI_REPORT = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "nvidia_smi" / "h200_580_capture.xml"
MODULES = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__gpu_monitoring_collector_modules"]


def test_the_collector_carries_every_module_it_imports_under_its_name():
    assert sorted(MODULES.values()) == sorted(imported_closure("gpu_metrics.py"))
    for module, file in MODULES.items():
        assert module == file[:-len(".py")].replace("/__init__", "").replace("/", ".")


def role_variables(**extra):
    variables = dict(defaults(ROLE), **load(ROLE / "vars" / "main.yml"))
    variables.update(role_path=str(ROLE), ansible_managed="managed", **extra)
    return variables


@pytest.mark.usefixtures("ansible_plugin_loader")  # the record's inputs read the sources with a lookup
def test_the_record_changes_with_any_module_the_collector_carries():
    hashes = Templar(loader=DataLoader(), variables=role_variables()).template(
        trust("{{ __gpu_monitoring_record_inputs.collector }}"))
    files = list(MODULES.values()) + ["carried_sources.py"]
    # the file lookup strips the trailing newline
    assert hashes == [hashlib.sha256((MODULE_UTILS / file).read_text().rstrip().encode()).hexdigest() for file in files]


@pytest.mark.usefixtures("ansible_plugin_loader")  # the template reads the sources with a lookup
def test_the_collectors_script_runs_the_code_it_carries(tmp_path):
    """The script from its template, as the role writes it, run as the wrapper runs it (-IS) where no collection is:
    it prints the metrics of a recorded nvidia-smi report."""
    variables = role_variables(gpu_monitoring_staging_index=str(tmp_path / "none"),
                               gpu_monitoring_nvidia_smi_command="cat %s" % NVIDIA_SMI_REPORT,
                               gpu_monitoring_kernel_log=str(tmp_path / "no-kmsg"), __gpu_monitoring_state_dir=str(tmp_path))
    script = tmp_path / "dlinfra_gpu_metrics.py"
    script.write_text(Templar(loader=DataLoader(), variables=variables).template(
        trust((ROLE / "templates" / "dlinfra_gpu_metrics.py.j2").read_text())))
    done = subprocess.run([sys.executable, "-IS", str(script), "--textfile-directory", "-"], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "nvidia_gpu_" in done.stdout


def test_the_collector_reads_the_index_where_shard_staging_writes_it():
    monitoring = yaml.safe_load((ROOT / "roles" / "gpu_monitoring" / "defaults" / "main.yml").read_text())
    staging = yaml.safe_load((ROOT / "roles" / "shard_staging" / "defaults" / "main.yml").read_text())
    assert monitoring["gpu_monitoring_staging_index"] == staging["shard_staging_index"] == DEFAULT_INDEX
