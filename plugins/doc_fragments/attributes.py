# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The attribute values the collection's modules share.

A module names one of these after ansible.builtin.action_common_attributes, which says what each attribute means;
these say how far the module supports it. A module's own ``attributes`` entry wins over the fragment's, key by key,
so a module states there what is its alone (a check-mode support with its reason, a narrower platform).
"""


class ModuleDocFragment(object):

    # dlinfra.gpu_cluster.attributes: runs against a POSIX managed node and shows no diff. How far check mode goes
    # differs from one such module to the next, so each states its check_mode support and why.
    DOCUMENTATION = r"""
attributes:
  diff_mode:
    support: none
  platform:
    platforms: posix
"""

    # dlinfra.gpu_cluster.attributes.read_only: only reads the managed node, so check mode loses nothing.
    READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    details: It only reads, so check mode runs it in full and reports what it finds.
  diff_mode:
    support: none
    details: It changes nothing, so there is no difference to show.
  platform:
    platforms: posix
"""

    # dlinfra.gpu_cluster.attributes.controller: an action plugin that does its work on the controller. Its check and
    # diff support are its own, stated in the module.
    CONTROLLER = r"""
attributes:
  platform:
    platforms: all
    details: It runs on the controller, once for all hosts; nothing of it runs on the managed nodes.
"""
