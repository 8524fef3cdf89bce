"""What the checks on the simulated lab that as-a-user leaves up share (drift_lab.py, validate_lab.py, rolling_lab.py): where that
lab's inventory and the recorded nvidia-smi outputs are, their messages, and a command on a lab node."""
import pathlib
import shutil
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
USER_INVENTORY = ROOT / ".cache" / "as-a-user" / "inventory"
FIXTURES = ROOT / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "nvidia_smi"


def lab_setting(name):
    """A variable the simulated lab's inventory gives every node (inventories/sim/group_vars/gpu_cluster.yml)."""
    return yaml.safe_load((ROOT / "inventories" / "sim" / "group_vars" / "gpu_cluster.yml").read_text())[name]


class Stage(object):
    """One stage's messages (prefixed with its name) and its commands on lab nodes; a failure ends the stage."""

    def __init__(self, name):
        self.name = name

    def step(self, text):
        print("\n%s: %s" % (self.name, text), flush=True)

    def fail(self, text):
        print("%s: FAILED: %s" % (self.name, text), file=sys.stderr, flush=True)
        sys.exit(1)

    def sh(self, host, script, check=True):
        """Run script with sh on the lab node host (docker exec); its stdout. A non-zero exit fails the stage unless check
        is false."""
        done = subprocess.run(["docker", "exec", host, "sh", "-c", script], capture_output=True, text=True, check=False)
        if check and done.returncode != 0:
            self.fail("on %s: %s: %s" % (host, script, done.stdout + done.stderr))
        return done.stdout


def fresh_work(stage, work):
    """A stage's work directory made afresh on the lab as-a-user left: its inventory copied in, and the collection
    installed the Galaxy way (install_collection). Fails the stage where that lab is missing."""
    if not (USER_INVENTORY / "hosts.yml").exists():
        stage.fail("%s is missing: this stage runs on the lab the as-a-user stage converged" % USER_INVENTORY)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copytree(USER_INVENTORY, work / "inventory", symlinks=True)
    return install_collection(work)


def install_collection(work):
    """Build the tarball and install it the Galaxy way into work/collections, outside the clone's ./collections link."""
    dist, collections = work / "dist", work / "collections"
    subprocess.run(["ansible-galaxy", "collection", "build", "--force", "--output-path", str(dist)], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    tarball = next(dist.glob("dlinfra-gpu_cluster-*.tar.gz"))
    subprocess.run(["ansible-galaxy", "collection", "install", "--offline", "--no-deps", "--force", "-p", str(collections),
                    str(tarball)], cwd=work, check=True, stdout=subprocess.DEVNULL)
    return collections
