"""What the module tests share: a module's main() run with its arguments, its JSON result and exit code."""

import json

import pytest

from ansible.module_utils.testing import patch_module_args


@pytest.fixture
def module_result(capsys):
    """module_result(main, args, check_mode=False): the result main() printed, with its exit code as _exit_code."""
    def run(main, args, check_mode=False):
        if check_mode:
            args = dict(args, _ansible_check_mode=True)
        with patch_module_args(args):
            with pytest.raises(SystemExit) as exit_info:
                main()
        result = json.loads(capsys.readouterr().out)
        result["_exit_code"] = exit_info.value.code
        return result
    return run
