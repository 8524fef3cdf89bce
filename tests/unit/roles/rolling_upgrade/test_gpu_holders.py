"""Which services the MIG path stops and starts again, and in what order: those of rolling_upgrade_gpu_holders that
were running, started in the list's order and stopped in the reverse one (tasks/mig.yml), also when a rollback finds
them stopped by the change it undoes. Rendered with Ansible's templating from the role's own files."""

import pathlib

import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from role_vars import defaults, load, trust

ROLE = pathlib.Path(__file__).resolve().parents[4] / "roles" / "rolling_upgrade"
MIG = yaml.safe_load((ROLE / "tasks" / "mig.yml").read_text())


def task(name):
    return next(t for t in MIG if t["name"] == name)


def listed(active):
    """What the listing task prints: `systemctl list-units --plain --no-legend` lines of the active ones."""
    return {"stdout_lines": ["%s.service loaded active running %s" % (name, name) for name in active]}


def render(variables, expression):
    return Templar(loader=DataLoader(), variables=variables).template(trust(expression))


def held_after(*listings):
    """__rolling_upgrade_held_services after mig.yml ran once per listing (a change, then its rollback)."""
    variables = dict(defaults(ROLE), **load(ROLE / "vars" / "main.yml"))
    note = task("Note them, to start them again after")["ansible.builtin.set_fact"]["__rolling_upgrade_held"]
    for listing in listings:
        variables["__rolling_upgrade_holders"] = listing
        variables["__rolling_upgrade_held"] = render(variables, note)
    return render(variables, "{{ __rolling_upgrade_held_services }}")


def test_the_running_holders_in_their_start_order_and_stopped_in_the_reverse_one():
    held = held_after(listed(["nvsm", "nvidia-fabricmanager", "nvidia-persistenced"]))  # systemctl sorts by name
    assert held == ["nvidia-persistenced.service", "nvidia-fabricmanager.service", "nvsm.service"]
    stop = task("Stop them while the MIG mode changes, the last to start first")["loop"]
    assert render(dict(defaults(ROLE), **load(ROLE / "vars" / "main.yml"), __rolling_upgrade_held=held),
                  stop) == ["nvsm.service", "nvidia-fabricmanager.service", "nvidia-persistenced.service"]


def test_a_rollback_starts_again_what_the_change_stopped():
    assert held_after(listed(["nvidia-persistenced", "nvidia-dcgm"]), listed([])) == [
        "nvidia-persistenced.service", "nvidia-dcgm.service"]


def test_nothing_running_nothing_stopped():
    assert held_after(listed([])) == []
