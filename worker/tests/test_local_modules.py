"""Modules on the local connection in a warm playbook process: forked, pipelined where Ansible
would run them from a file, their temporary directories made and removed without a shell; with the
results Ansible gives when it runs them as it comes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible import release as ansible_release

PLAYBOOK = Path(__file__).parent / "playbooks" / "modules.yml"
ANSIBLE_2_18 = ansible_release.__version__.startswith("2.18.")
WORKER = Path(__file__).parent.parent

#: ansible-playbook, as it comes or with the warm playbook process's module handling installed;
#: every command a process of the run spawns is written to POPEN_LOG.
_BOOTSTRAP = """
import os, sys
def logged(event, args):
    if event == "subprocess.Popen":
        with open(os.environ["POPEN_LOG"], "a") as log:
            print(repr(args[1]), file=log)
sys.addaudithook(logged)
if sys.argv[1] in ("warm", "inline"):
    from ansible_operator_worker import process
    from ansible_operator_worker.speedups import local_tmp, module_utils, modules
    process.BASE_SYS_PATH[:] = sys.path[1:]
    modules.install()
    local_tmp.install()
    # What the zygote imports before it stashes anything (the kubernetes client registers exit
    # handlers as it is imported: a stash build that did so would not be kept).
    import importlib
    from ansible_operator_worker.zygote import PRELOAD
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    # Each payload's module_utils stashed once built (in the task's process, which forks the
    # module), as the zygote stashes the payloads it keeps; each adoption logged.
    from ansible import constants
    from ansible.executor import module_common
    from ansible.plugins import action
    build = module_common.modify_module
    def stashing(*args, **kwargs):
        built = build(*args, **kwargs)
        cache = os.path.join(constants.DEFAULT_LOCAL_TMP, "ansiballz_cache")
        for name in os.listdir(cache):
            if not name.endswith((".lock", "-part")):
                with open(os.path.join(cache, name), "rb") as payload:
                    module_utils.stash(payload.read())
        return built
    module_common.modify_module = action.modify_module = stashing
    adopt = module_utils.adopt
    def adopting(names, archive):
        adopt(names, archive)
        if "ansible-operator-stash-" not in archive:  # a module process's, not a stash build's
            with open(os.environ["ADOPT_LOG"], "a") as log:
                print(len(names), file=log)
    module_utils.adopt = adopting
    # Each module run in place logged, with where: a task's own process, or the playbook process
    # running its task inline (when asked to).
    from ansible_operator_worker.speedups import inline_tasks, modules_in_place
    decide = modules_in_place.runs_in_place
    def logging_in_place(source, inline=False):
        in_place = decide(source, inline)
        if in_place:
            where = "inline" if inline else "task"
            with open(os.environ["IN_PLACE_LOG"], "a") as log:
                print(f"{modules_in_place.module_name(source).rpartition('.')[2]}:{where}", file=log)
        return in_place
    modules_in_place.runs_in_place = logging_in_place
    if sys.argv[1] == "inline":
        inline_tasks.install()
from ansible.cli.playbook import main
sys.argv = ["ansible-playbook", *sys.argv[2:]]
main()
"""

#: Paths that differ between any two runs (temporary directories, the module file's name).
_RANDOM = re.compile(r"""/[^\s'"]*ansible[-_][^\s'"]*|<stdin>|\S*AnsiballZ_\w+\.py| at 0x[0-9a-f]+""")


def _play(mode: str, tmp_path: Path) -> tuple[int, list[dict[str, Any]], list[str]]:
    """ansible-playbook's exit status, every task result in order, and the commands it spawned
    (and, warm, the number of module_utils each module process or module run in place adopted in
    `<mode>.adopted`, the modules run in place in `<mode>.in_place`). The ConfigMaps the play
    creates are named for the test (`tmp_path`), so that the same play run meanwhile under another
    ansible-core, against the same cluster, does not find them."""
    workdir = tmp_path / mode
    workdir.mkdir()
    log = tmp_path / f"{mode}.popen"
    inventory = tmp_path / "hosts"
    inventory.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    env = {
        **os.environ,
        "PYTHONPATH": str(WORKER),
        "POPEN_LOG": str(log),
        "ADOPT_LOG": str(tmp_path / f"{mode}.adopted"),
        "IN_PLACE_LOG": str(tmp_path / f"{mode}.in_place"),
        "ANSIBLE_STDOUT_CALLBACK": "results_json",
        "ANSIBLE_CALLBACK_PLUGINS": str(Path(__file__).parent / "callback_plugins"),
        "ANSIBLE_LIBRARY": str(PLAYBOOK.parent / "library"),
        "ANSIBLE_NOCOLOR": "1",
        # The play's own, so that what other tests' plays leave there meanwhile is not counted.
        "ANSIBLE_REMOTE_TMP": str(tmp_path / "remote_tmp"),
    }
    done = subprocess.run(
        [sys.executable, "-c", _BOOTSTRAP, mode, "-i", str(inventory), str(PLAYBOOK)]
        + ["-e", f"workdir={workdir}", "-e", f"suffix={_run_name(tmp_path)}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stdout, done.stderr
    results = json.loads(done.stdout.replace(str(workdir), "WORKDIR"))["results"]
    spawned = log.read_text().splitlines() if log.exists() else []
    return done.returncode, results, spawned


def _run_name(tmp_path: Path) -> str:
    """A DNS label unique to this test's run: the same for each of its plays."""
    return hashlib.sha256(str(tmp_path.resolve()).encode()).hexdigest()[:10]


#: What differs between any two runs of the same task: times, and the cluster's bookkeeping.
_VOLATILE = frozenset(
    {"start", "end", "delta", "mtime", "atime", "ctime", "inode", "version", "_original_basename"}
    | {"resourceVersion", "managedFields", "creationTimestamp", "uid"}
)


def _comparable(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _comparable(item) for key, item in value.items() if key not in _VOLATILE}
    if isinstance(value, list):
        return [_comparable(item) for item in value]
    if isinstance(value, str) and value.startswith("Traceback (most recent call last):"):
        # A module that crashed: its exception, not the frames of its wrapper (a file Ansible
        # runs, or a pipelined source, with no lines to show) and of the process that ran it.
        return _RANDOM.sub("RANDOM", value.strip().splitlines()[-1])
    if isinstance(value, str):
        return _RANDOM.sub("RANDOM", value)
    return value


@pytest.mark.skipif("KUBECONFIG" not in os.environ, reason="the k8s tasks need a cluster (KUBECONFIG)")
def test_local_modules_give_the_results_ansible_does_without_a_shell(tmp_path: Path) -> None:
    cold_status, cold, cold_spawned = _play("cold", tmp_path)
    warm_status, warm, warm_spawned = _play("warm", tmp_path)
    assert warm_status == cold_status == 0
    assert _comparable(warm) == _comparable(cold)
    results = {entry["task"]: entry for entry in warm}
    assert results["command"]["result"]["stdout"] == "hello"
    assert results["no_log"]["result"]["censored"].startswith("the output has been hidden")
    assert results["failing module"]["status"] == "failed" and results["failing module"]["result"]["rc"] == 1
    assert results["module that breaks"]["result"]["module_stdout"].startswith("not json")
    assert results["k8s_info"]["result"]["resources"][0]["metadata"]["name"] == "default"
    assert results["k8s in check mode with diff"]["result"]["changed"] is True
    assert results["k8s in check mode with diff"]["result"]["method"] == "create"
    assert results["k8s refused"]["status"] == "failed"
    assert "Not A Valid Name" in results["k8s refused"]["result"]["msg"]
    # Ansible runs each module with a shell command, and makes and removes a temporary directory
    # for it with more; the warm process forks every module and spawns no shell at all (what it
    # spawns is what the modules run themselves).
    assert sum("AnsiballZ_" in command for command in cold_spawned) >= 8
    assert sum("mkdir" in command for command in cold_spawned) >= 8
    assert not any("/bin/sh" in command for command in warm_spawned), warm_spawned
    assert (tmp_path / "remote_tmp").is_dir()
    assert not list((tmp_path / "remote_tmp").iterdir())
    # The kubernetes.core and operator_sdk.util modules ran in their task's own process, a loop's
    # three items one after another in the same one; the one under a task's timeout did not.
    in_place = (tmp_path / "warm.in_place").read_text().split()
    assert in_place == [
        f"{name}:task"
        for name in ["k8s_info", "k8s", "k8s"] + ["k8s_info"] * 4 + ["k8s_status"] + ["k8s_info"] * 3 + ["k8s"] * 4
    ]
    assert results["k8s_info loop"]["result"]["results"][1]["resources"][0]["metadata"]["name"] == "kube-system"
    assert results["k8s_info loop"]["result"]["results"][2]["resources"] == []
    assert results["k8s_info no_log"]["result"]["censored"].startswith("the output has been hidden")
    assert results["k8s_info with a timeout"]["result"]["resources"][0]["metadata"]["name"] == "kube-system"
    assert results["k8s_status of nothing"]["status"] == "failed"
    # Its own server refuses connections: not the kubeconfig's server, which an earlier module of
    # the process loaded (nor, in the loop, the item before).
    assert results["k8s_info with credentials of its own"]["status"] == "failed"
    assert "port=1)" in json.dumps(results["k8s_info with credentials of its own"]["result"])
    loop = results["k8s_info loop, the kubeconfig's, then credentials of its own"]["result"]["results"]
    assert loop[0]["resources"][0]["metadata"]["name"] == "default"
    assert "resources" not in loop[1] and "port=1)" in json.dumps(loop[1])
    # On ansible-core 2.18 (whose payload cache is the zip) every module process adopted the
    # module_utils its task's process stashed: `ansible.module_utils.basic` and what it imports at
    # the least; so did the first module run in a task's process, but not the later items of the
    # two loops (three of them: the first item changed them). 2.19 keeps a pickle there, and its modules import as they come.
    adopted = [int(n) for n in (tmp_path / "warm.adopted").read_text().split()] if ANSIBLE_2_18 else []
    module_processes = sum(f"{sys.executable} " in c and "AnsiballZ_" in c for c in cold_spawned)
    assert len(adopted) == (module_processes - 3 if ANSIBLE_2_18 else 0) and module_processes >= 16
    assert all(n >= 20 for n in adopted), adopted


@pytest.mark.skipif("KUBECONFIG" not in os.environ, reason="the k8s tasks need a cluster (KUBECONFIG)")
@pytest.mark.skipif(not ANSIBLE_2_18, reason="inline tasks know ansible-core 2.18's executor only")
def test_module_tasks_inline_give_the_results_ansible_does(tmp_path: Path) -> None:
    cold_status, cold, _ = _play("cold", tmp_path)
    inline_status, inline, inline_spawned = _play("inline", tmp_path)
    assert inline_status == cold_status == 0
    assert _comparable(inline) == _comparable(cold)
    assert not any("/bin/sh" in command for command in inline_spawned), inline_spawned
    # The plain kubernetes.core and operator_sdk.util tasks ran in the playbook process, their
    # modules in place; a loop's items in their task's process; the task under a timeout, and the
    # one whose arguments call a lookup, forked (that one's module in place in its process).
    in_place = (tmp_path / "inline.in_place").read_text().split()
    assert in_place == [
        "k8s_info:inline",
        "k8s:inline",
        "k8s:inline",
        *["k8s_info:task"] * 3,
        "k8s_info:inline",
        "k8s_status:inline",
        "k8s_info:inline",
        *["k8s_info:task"] * 2,
        "k8s:task",
        "k8s:inline",
        "k8s:inline",
        "k8s:inline",
    ]
    results = {entry["task"]: entry for entry in inline}
    assert results["k8s with a lookup after it"]["status"] == "ok"
    assert results["k8s with a lookup after it"]["result"]["method"] == "create"
    assert results["k8s in check mode with diff"]["result"]["method"] == "create"
    assert results["k8s_info no_log"]["result"]["censored"].startswith("the output has been hidden")
