# Copyright: dlinfra.gpu_cluster contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""shard_fetch's controller half: ship the lists that live on the controller (shards_src, in stream mode streamed_src,
peer-assisted peer_src) to the node's temporary directory, so the module reads them as shards_file / streamed_file /
peer_file without the lists becoming managed state. Runs under async too (the role starts every node's fetch at once
that way): the temporary directory then goes when the module ends.

The secrets (headers, url_password, proxy, peer_token) travel the same way, as a 0600 file (access_file) that the
module reads and removes as it starts: an async job's payload, which holds the module's arguments, stays on the node's
disk for the whole fetch."""

import json
import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.dlinfra.gpu_cluster.plugins.module_utils._staging.input import ACCESS_OPTIONS

# controller option -> (module option, the options it excludes, file name in the node's temporary directory)
_SHIPPED = {"shards_src": ("shards_file", ("shards", "shards_file"), "shards.json"),
            "streamed_src": ("streamed_file", ("streamed_file",), "streamed.json"),
            "peer_src": ("peer_file", ("peer_file",), "peer.json")}


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _supports_async = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        module_args = dict(self._task.args)
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        secrets = dict((key, module_args.pop(key)) for key in ACCESS_OPTIONS if module_args.get(key) is not None)
        local = None
        try:
            if secrets:
                if "access_file" in module_args:
                    raise AnsibleActionFail("shard_fetch: give access_file or %s, not both" % ", ".join(sorted(secrets)))
                descriptor, local = tempfile.mkstemp(prefix="dlinfra-shard-fetch-access-")  # 0600
                with os.fdopen(descriptor, "w") as handle:
                    json.dump(secrets, handle)
                module_args["access_file"] = self._ship(local, "access.json")
            for option, (module_option, excluded, remote_name) in _SHIPPED.items():
                source = module_args.pop(option, None)
                if source is None:
                    continue
                if any(module_args.get(other) for other in excluded):
                    raise AnsibleActionFail("shard_fetch: give one of %s or %s, not several" % (", ".join(excluded), option))
                source = os.path.abspath(os.path.expanduser(source))
                if not os.path.isfile(source):
                    raise AnsibleActionFail("shard_fetch: %s %s is not a file on the controller" % (option, source))
                module_args[module_option] = self._ship(source, remote_name)
            result.update(self._execute_module(module_name="dlinfra.gpu_cluster.shard_fetch", module_args=module_args,
                                               task_vars=task_vars, wrap_async=wrap_async))
        finally:
            if local is not None:
                os.unlink(local)
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def _ship(self, source, remote_name):
        """source (a file on the controller) copied into the node's temporary directory for this run; its path there."""
        if self._connection._shell.tmpdir is None:
            self._make_tmp_path()
        remote = self._connection._shell.join_path(self._connection._shell.tmpdir, remote_name)
        self._transfer_file(source, remote)
        self._fixup_perms2((self._connection._shell.tmpdir, remote))
        return remote
