# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""shard_fetch's controller half: ship a shard list that lives on the controller (shards_src) to the node's
temporary directory, so the module can read it as shards_file without the list becoming managed state."""

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        module_args = dict(self._task.args)
        source = module_args.pop("shards_src", None)
        try:
            if source is not None:
                if module_args.get("shards") or module_args.get("shards_file"):
                    raise AnsibleActionFail("shard_fetch: give one of shards, shards_file or shards_src, not several")
                source = os.path.abspath(os.path.expanduser(source))
                if not os.path.isfile(source):
                    raise AnsibleActionFail("shard_fetch: shards_src %s is not a file on the controller" % source)
                if self._connection._shell.tmpdir is None:
                    self._make_tmp_path()
                remote = self._connection._shell.join_path(self._connection._shell.tmpdir, "shards.json")
                self._transfer_file(source, remote)
                self._fixup_perms2((self._connection._shell.tmpdir, remote))
                module_args["shards_file"] = remote
            result.update(self._execute_module(module_name="dlinfra.gpu_cluster.shard_fetch", module_args=module_args,
                                               task_vars=task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
