# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the decisions of the roles that set up where people work (Jupyter, the remote desktop). Not an interface;
the filters in plugins/filter/ are."""
