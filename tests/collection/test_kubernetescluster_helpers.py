"""The KubernetesCluster sample's own Python: the host precheck and the kube_files module."""

import importlib.util
import os
import socket
import stat
from pathlib import Path
from types import ModuleType

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


host_check = load(PLAYBOOKS / "kubernetescluster" / "host_check.py")
kube_files = load(PLAYBOOKS / "library" / "kube_files.py")


def test_a_port_in_use_is_named_unless_this_clusters_own_process_holds_it(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        check = {"name": "kube-apiserver", "port": str(port), "pidfile": str(tmp_path / "missing.pid")}
        assert host_check.problems("127.0.0.1", 0, [check]) == [
            f"port {port} (kube-apiserver) is in use on 127.0.0.1"
        ]
        ours = tmp_path / "kube-apiserver.pid"
        ours.write_text(str(os.getpid()))
        assert host_check.problems("127.0.0.1", 0, [dict(check, pidfile=str(ours))]) == []
    assert host_check.problems("127.0.0.1", 0, [check]) == []


def test_too_little_free_space_is_named() -> None:
    [problem] = host_check.problems("127.0.0.1", 1 << 40, [])
    assert problem.startswith("has ") and problem.endswith(f"MiB free in its home directory, needs {1 << 40}")


def test_files_are_written_only_when_content_or_mode_differ(tmp_path: Path) -> None:
    path = str(tmp_path / "run.sh")
    assert kube_files.write_if_changed(path, "#!/bin/sh\n", 0o755)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o755
    assert not kube_files.write_if_changed(path, "#!/bin/sh\n", 0o755)
    assert kube_files.write_if_changed(path, "#!/bin/sh\n", 0o700)
    assert kube_files.write_if_changed(path, "#!/bin/sh\nexit 0\n", 0o700)
    assert Path(path).read_text() == "#!/bin/sh\nexit 0\n"
    assert sorted(os.listdir(tmp_path)) == ["run.sh"], "no temporary file left"
