# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The problems the shard_staging role's validation reports about its datasets and targets: pure Python.

``input_problems`` lists, one line each, what stops the role before it plans: no targets, dataset names given twice or
not usable as directory names, and the slice problems of the inventory (computed by plugin_utils/_common's
inventory_slices and passed in). The role fails once, listing them all.
"""

import re

_DIRECTORY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def input_problems(targets, names, sliced):
    """One line per problem; empty when the role can plan.

    targets: shard_staging_targets. names: the names of shard_staging_datasets, in their order. sliced: the lines of
    shard_staging_slice_problems, appended as they are.
    """
    problems = []
    if len(targets) == 0:
        problems.append("shard_staging_targets is empty: put the staging hosts in [stage_targets] or set "
                        "shard_staging_targets")
    counts = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    repeated = [name for name, count in counts.items() if count > 1]
    if repeated:
        problems.append("shard_staging_datasets: the name(s) %s appear more than once; give each dataset its own name"
                        % ", ".join(str(name) for name in repeated))
    bad = [name for name in names if not _DIRECTORY_NAME.match(str(name))]
    if bad:
        problems.append("shard_staging_datasets: the name(s) %s are not usable as directory names; use letters, digits, "
                        ". _ -" % ", ".join(str(name) for name in bad))
    return problems + list(sliced)
