# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the nvidia_driver role's decisions: branch and flavour per node, preflight, swaps, Ubuntu's
precompiled modules, dnf module streams. May change without notice; the modules, filters, actions and role
arguments are the interface (docs/maintaining.md)."""
