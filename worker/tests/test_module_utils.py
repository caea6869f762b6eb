"""Module processes adopt the module_utils the worker stashed: only the ones whose payload file is
the same, whose environment reads give the same, and whose dependencies are adopted too; the
stash build leaves the process it runs in as it was."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

WORKER = Path(__file__).parent.parent

_STUB = "from pkgutil import extend_path\n__path__=extend_path(__path__,__name__)\n"

_FILES = {
    "ansible/__init__.py": _STUB,
    "ansible/module_utils/__init__.py": _STUB,
    "ansible/module_utils/alpha.py": "VALUE = 1\n",
    "ansible/module_utils/beta.py": "from ansible.module_utils.alpha import VALUE\nDOUBLE = VALUE * 2\n",
    "ansible/module_utils/gamma.py": "import os\nSETTING = os.environ.get('STASH_TEST_SETTING')\n",
    "ansible/module_utils/delta.py": (
        "import warnings\nwarnings.simplefilter('ignore', ResourceWarning)\n"
        "try:\n    import no_such_library_anywhere\nexcept ImportError:\n"
        "    import traceback\n    ERROR = traceback.format_exc()\n"
    ),
    "ansible/module_utils/epsilon.py": "import pathlib\nHERE = pathlib.Path(__file__).parent\n",
    "ansible/modules/__init__.py": "",
    "ansible/modules/ping.py": "raise SystemExit('a module is never imported by the stash')\n",
}

#: Runs in a fresh interpreter: stashes payload one (and three, which lacks a module), then, in forks set up as module processes
#: (Ansible's modules unloaded, the adopter installed, a payload first on the path), imports from
#: each payload and reports what it found.
_SCRIPT = """
import json, os, sys, warnings
from ansible_operator_worker import process
from ansible_operator_worker.speedups import module_utils, modules
process.BASE_SYS_PATH[:] = sys.path[1:]
import ansible.release  # the controller's own, set aside while the stash is built
controller = sys.modules["ansible"]
state = (sys.meta_path[:], sys.path[:], warnings.filters[:], dict(os.environ))
one, two, three = sys.argv[1:4]
added = module_utils.stash(open(one, "rb").read())
report = {
    "added": added,
    # Without gamma: nothing new, and the package stashed before loses gamma meanwhile.
    "added without gamma": module_utils.stash(open(three, "rb").read()),
    "controller kept": sys.modules["ansible"] is controller and "ansible.module_utils.alpha" not in sys.modules,
    "process unchanged": state == (sys.meta_path[:], sys.path[:], warnings.filters[:], dict(os.environ)),
    "adoptable": sorted(n for n, s in module_utils.STASH.items() if s.adoptable),
}

def module_process(archive, env):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.environ.update(env)
        modules.unload_ansible()
        module_utils.install()
        sys.path.insert(0, archive)
        import ansible.module_utils.beta, ansible.module_utils.gamma, ansible.module_utils.delta
        from ansible.module_utils import alpha
        found = {
            "adopted": sorted(n for n, s in module_utils.STASH.items() if sys.modules.get(n) is s.module),
            "double": ansible.module_utils.beta.DOUBLE,
            "setting": ansible.module_utils.gamma.SETTING,
            "alpha file": alpha.__file__,
            "alpha spec origin": alpha.__spec__.origin,
            "gamma file": ansible.module_utils.gamma.__file__,
            "ansible path": ansible.__path__[0],
            "error": ansible.module_utils.delta.ERROR,
            "ignores resource warnings": any(f[0] == "ignore" and f[2] is ResourceWarning for f in warnings.filters),
        }
        os.write(write, json.dumps(found).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)

report["same payload"] = module_process(one, {})
report["other alpha"] = module_process(two, {})
report["other setting"] = module_process(one, {"STASH_TEST_SETTING": "on"})
print(json.dumps(report))
"""


def _payload(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        for name, text in files.items():
            zipped.writestr(name, text)
    return path


def _fresh(archive: Path, name: str, env: dict[str, str]) -> str:
    """What `name`'s traceback global is when a new interpreter imports it from `archive`."""
    code = f"import sys; sys.path.insert(0, {str(archive)!r}); import {name} as m; print(m.ERROR, end='')"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


def test_modules_are_adopted_only_where_a_fresh_import_gives_the_same(tmp_path: Path) -> None:
    for name in ("one", "two", "three"):
        (tmp_path / name).mkdir()
    one = _payload(tmp_path / "one" / "payload.zip", _FILES)
    two = _payload(tmp_path / "two" / "payload.zip", {**_FILES, "ansible/module_utils/alpha.py": "VALUE = 2\n"})
    without_gamma = {name: text for name, text in _FILES.items() if "gamma" not in name}
    three = _payload(tmp_path / "three" / "payload.zip", without_gamma)
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(one), str(two), str(three)],
        env={"PYTHONPATH": str(WORKER), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    everything = [
        "ansible",
        "ansible.module_utils",
        "ansible.module_utils.alpha",
        "ansible.module_utils.beta",
        "ansible.module_utils.delta",
        "ansible.module_utils.gamma",
    ]
    # The module itself is never imported; epsilon keeps its copy's path in a `Path`.
    assert report["adoptable"] == everything
    assert report["added"] == len(everything) + 1
    assert report["added without gamma"] == 0
    assert report["controller kept"] and report["process unchanged"]

    same = report["same payload"]
    assert same["adopted"] == everything
    assert same["double"] == 2 and same["setting"] is None
    assert same["alpha file"] == f"{one}/ansible/module_utils/alpha.py" == same["alpha spec origin"]
    assert same["ansible path"] == f"{one}/ansible"
    assert same["ignores resource warnings"]
    # A traceback kept at import names the payload the module runs from, as a fresh import's does.
    assert same["error"] == _fresh(one, "ansible.module_utils.delta", {"PATH": "/usr/bin:/bin"})

    # alpha's file differs: alpha and beta (which imports it) come from the payload, the rest is adopted.
    other = report["other alpha"]
    assert other["adopted"] == ["ansible", "ansible.module_utils", "ansible.module_utils.delta", "ansible.module_utils.gamma"]
    assert other["double"] == 4
    assert other["alpha file"] == f"{two}/ansible/module_utils/alpha.py"
    assert other["gamma file"] == f"{two}/ansible/module_utils/gamma.py"

    # gamma read a variable that has another value here: it is imported again, and reads it.
    setting = report["other setting"]
    assert "ansible.module_utils.gamma" not in setting["adopted"] and "ansible.module_utils.beta" in setting["adopted"]
    assert setting["setting"] == "on"
