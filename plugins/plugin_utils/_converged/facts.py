# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node's min facts, gathered once per run while the roles find the node converged.

A role that finds its record still true changes nothing on the node, so the next role can template its variables with
the facts the last gather brought instead of gathering again. The host fact FACT holds the run those facts belong to;
it is emptied where something may have changed them: a role that runs in full, a node rolling_upgrade is about to
change (a reboot may bring another kernel). A fact cache that outlives the run cannot mislead: the next run is another.
"""

import os

FACT = "dlinfra_facts_run"


def run_id():
    """This ansible-playbook run, as the process id and start time of the process that forked the worker this runs in;
    '' where /proc cannot tell (then every role gathers)."""
    parent = os.getppid()
    try:
        with open("/proc/%d/stat" % parent) as stat:
            started = stat.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""
    return "%d:%s" % (parent, started)


def gathered_in(task_vars, run):
    """Whether the host's facts were gathered in RUN with nothing run in full since."""
    return bool(run) and (task_vars.get("ansible_facts") or {}).get(FACT) == run
