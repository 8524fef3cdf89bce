# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the rolling_upgrade role's decisions: its preflight problems. May change without notice;
the modules, filters, actions and role arguments are the interface (docs/maintaining.md)."""
