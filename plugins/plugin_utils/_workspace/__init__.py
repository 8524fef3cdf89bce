# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the decisions of the roles that set up where people work on the nodes (remote_desktop). Not a public
interface; the filters in plugins/filter are."""
