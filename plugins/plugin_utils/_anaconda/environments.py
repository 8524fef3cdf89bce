# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the anaconda role does with each conda environment: pure Python.

An environment conda does not list is created; one whose environment file changed since it was last built from it
(the file's sha1 differs from the one recorded in the environment) is updated; any other is left alone.
"""


def env_action(path, known, recorded_sha1, wanted_sha1):
    """create, update or none for the environment at ``path``; ``known`` lists conda's environments (their paths)."""
    if path not in known:
        return "create"
    if recorded_sha1 != wanted_sha1:
        return "update"
    return "none"


def env_step(environment, src, path, known, recorded_sha1, wanted_sha1):
    """The plan's entry for one of anaconda_environments: its name, environment file (src), prune (true unless
    set), path and action (see env_action)."""
    return {"name": environment["name"], "src": src, "prune": environment.get("prune", True), "path": path,
            "action": env_action(path, known, recorded_sha1, wanted_sha1)}
