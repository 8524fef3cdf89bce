# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: what several controller concerns share: role input checks, the inventory's cluster slices, the HTTP client,
the listening sockets ss prints and the certificate checks. May change without notice;
the modules, filters, actions and role arguments are the interface (docs/maintaining.md)."""
