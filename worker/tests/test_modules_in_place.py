"""A module run in the task's own process: its output and status as a module process would give
them, and the process left as it was. The modules' results against Ansible's own are compared in
test_local_modules.py."""

from __future__ import annotations

import atexit
import json
import locale
import os
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import kubeconfigs
import pytest
from kubernetes import client, config

from ansible_operator_worker import kubernetes_state, process
from ansible_operator_worker.speedups import module_utils, modules, modules_in_place

_ANSIBLE = ("ansible", "ansible_collections")

#: A module that changes what a module may change in its process, writes to both streams (the
#: second one through its descriptor, as a command it runs would) and exits with 3.
_MODULE = b"""
import atexit, os, signal, subprocess, sys, warnings
assert "ansible.release" not in sys.modules, "the controller's Ansible was not set aside"
print('{"changed": true, "env": "%s", "cwd": "%s", "main": "%s"}' % (
    os.environ.get("FROM_COMMAND_LINE"), os.getcwd(), __name__))
atexit.register(lambda: print("at exit", file=sys.stderr))
os.environ["SET_BY_MODULE"] = "1"
os.chdir("/")
os.umask(0o077)
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
warnings.simplefilter("ignore")
sys.path.insert(0, "/nowhere")
subprocess.run(["sh", "-c", "echo from a child >&2"], check=True)
sys.exit(3)
"""


def _process_state() -> tuple[Any, ...]:
    """What a module run in place may change in this process."""
    return (
        dict(os.environ),
        os.getcwd(),
        list(sys.path),
        list(sys.meta_path),
        {name: module for name, module in sys.modules.items() if name.split(".")[0] in _ANSIBLE},
        sys.modules["__main__"],
        signal.getsignal(signal.SIGUSR1),
        list(warnings.filters),
        (sys.stdout, sys.stderr),
        [os.fstat(fd).st_ino for fd in (0, 1, 2)],
    )


def _run_in_place(source: bytes, env: dict[str, str], cwd: str | None) -> tuple[int, bytes, bytes]:
    call = modules.ModuleCall(env=env, script=None, interpreter=sys.executable)
    return modules_in_place.run(lambda: modules.become_module(call, source, cwd))


def test_a_module_run_in_place_gives_its_output_and_leaves_the_process_as_it_was(tmp_path: Path) -> None:
    import ansible.release  # noqa: F401 - the controller's Ansible, which the module must not see

    process.BASE_SYS_PATH[:] = sys.path[1:]
    os.chdir(tmp_path)
    before = _process_state()
    module_utils.STASH["stashed"] = None  # type: ignore[assignment]
    own_exit_ran: list[bool] = []
    atexit.register(own_exit_ran.append, True)
    handlers = atexit._ncallbacks()  # type: ignore[attr-defined]

    status, out, err = _run_in_place(_MODULE, {"FROM_COMMAND_LINE": "yes"}, str(tmp_path))

    # The module's exit handler ran at its end; this process's own neither ran nor was lost.
    assert atexit._ncallbacks() == handlers and not own_exit_ran  # type: ignore[attr-defined]
    atexit.unregister(own_exit_ran.append)

    assert status == 3, err
    assert out == f'{{"changed": true, "env": "yes", "cwd": "{tmp_path}", "main": "__main__"}}\n'.encode()
    assert err == b"from a child\nat exit\n"
    umask = os.umask(0o022)
    os.umask(umask)
    assert umask == 0o022
    assert _process_state() == before
    # The module may have changed the module_utils it adopted: a later module imports its own.
    assert module_utils.STASH == {}


def test_an_exception_escaping_the_module_is_its_traceback_and_status_1() -> None:
    process.BASE_SYS_PATH[:] = sys.path[1:]
    status, out, err = _run_in_place(b"print('partial')\nraise RuntimeError('broken module')\n", {}, None)
    assert status == 1
    assert out == b"partial\n"
    assert err.startswith(b"Traceback (most recent call last):") and err.endswith(b"RuntimeError: broken module\n")


@pytest.mark.parametrize(
    ("source", "name"),
    [
        # ansible-core 2.18's wrapper, then 2.19's and later's.
        (b"ZIPDATA = 'UEsDBA=='\n    runpy.run_module(mod_name='ansible_collections.kubernetes.core.plugins.modules.k8s',", "ansible_collections.kubernetes.core.plugins.modules.k8s"),
        (b"    ansible_module='k8s_info',\nmodule_fqn='ansible_collections.kubernetes.core.plugins.modules.k8s_info',\nparams='{}'", "ansible_collections.kubernetes.core.plugins.modules.k8s_info"),
        (b"print('no wrapper')", None),
    ],
)
def test_the_module_name_is_read_from_its_wrapper(source: bytes, name: str | None) -> None:
    assert modules_in_place.module_name(source) == name


def test_only_a_task_process_or_a_module_task_inline_runs_modules_in_place() -> None:
    source = b"module_fqn='ansible_collections.kubernetes.core.plugins.modules.k8s',"
    assert not modules_in_place.runs_in_place(source)
    # A module task inline in the playbook process: in place while no thread but the strategy's
    # results thread runs beside it; a module of another collection never.
    assert modules_in_place.runs_in_place(source, inline=True)
    assert not modules_in_place.runs_in_place(
        b"module_fqn='ansible_collections.community.general.plugins.modules.x',", inline=True
    )
    from ansible.plugins.strategy import StrategySentinel, results_thread_main

    release = threading.Event()

    class Queue:
        def get(self) -> StrategySentinel:
            release.wait()
            return StrategySentinel()

    class Strategy:
        _final_q = Queue()

    results = threading.Thread(target=results_thread_main, args=(Strategy(),))
    other = threading.Thread(target=release.wait)
    results.start()
    try:
        assert modules_in_place.runs_in_place(source, inline=True)
        other.start()
        assert not modules_in_place.runs_in_place(source, inline=True)
    finally:
        release.set()
        results.join()
        other.join()


#: A module that reports the kubernetes client state it starts with, then loads a kubeconfig and
#: sets the locale from an environment of C, as an AnsibleModule does from its own.
_KUBERNETES_MODULE = b"""
import json, locale, os
from kubernetes import client, config
from kubernetes.config import kube_config
default = client.Configuration.get_default_copy()
print(json.dumps({"host": default.host, "default_kubeconfig": kube_config.KUBE_CONFIG_DEFAULT_LOCATION}))
config.load_kube_config(config_file=os.environ["MODULE_KUBECONFIG"])
os.environ["LC_ALL"] = "C"
locale.setlocale(locale.LC_ALL, "")
"""


def test_a_module_run_in_place_starts_with_a_new_kubernetes_client_state_and_leaves_the_process_its_own(
    tmp_path: Path,
) -> None:
    process.BASE_SYS_PATH[:] = sys.path[1:]
    with kubernetes_state.kept():
        config.load_kube_config(config_file=str(kubeconfigs.write(tmp_path / "process", "https://process.example", "p")))
        before = (kubernetes_state.save(), locale.setlocale(locale.LC_ALL))
        module = kubeconfigs.write(tmp_path / "module", "https://module.example", "m")
        env = {"KUBECONFIG": str(module), "MODULE_KUBECONFIG": str(module)}
        status, out, err = _run_in_place(_KUBERNETES_MODULE, env, str(tmp_path))
        assert status == 0, err
        # A new interpreter's: no configuration loaded, the default kubeconfig its environment's.
        assert json.loads(out) == {"host": client.Configuration().host, "default_kubeconfig": str(module)}
        assert (kubernetes_state.save(), locale.setlocale(locale.LC_ALL)) == before
        assert client.Configuration.get_default_copy().host == "https://process.example"
