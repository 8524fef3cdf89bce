# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which runs of a role write its converged_state record.

A record vouches for what a run of every phase of the role leaves on the node, so a run that --tags or --skip-tags
limit to some of the role's phases records nothing. A role's phases carry the tags ROLE and ROLE_PHASE; its record,
its preflight and its converged check carry always.
"""


def every_phase_runs(role, run_tags, skip_tags):
    """Whether a run with these tags (ansible_run_tags, ansible_skip_tags) runs every phase of ROLE.

    --tags must take all (the default) or ROLE; --skip-tags must leave ROLE, each ROLE_PHASE and always (always_*
    alike). Other skip tags, such as molecule's molecule-notest and notest, leave the role whole.
    """
    if "all" not in run_tags and role not in run_tags:
        return False
    return not any(tag in (role, "always") or tag.startswith((role + "_", "always_")) for tag in skip_tags)
