"""Precheck of one KubernetesCluster host, run there by ansible.builtin.script.

Usage: host_check.py ADDRESS MIN_FREE_MIB CHECKS_JSON, where CHECKS_JSON lists
{"name", "port", "pidfile"}: a port must be free on ADDRESS unless the process in its pidfile (this
cluster's own) runs. Prints one problem per line; nothing when the host is fit.
"""

import json
import os
import socket
import sys


def problems(address: str, min_free_mib: int, checks: list[dict[str, str]]) -> list[str]:
    found = []
    uname = os.uname()
    if (uname.sysname, uname.machine) != ("Linux", "x86_64"):
        found.append(f"is {uname.sysname} {uname.machine}, the releases are for Linux x86_64")
    home = os.statvfs(os.path.expanduser("~"))
    free_mib = home.f_bavail * home.f_frsize // (1024 * 1024)
    if free_mib < min_free_mib:
        found.append(f"has {free_mib} MiB free in its home directory, needs {min_free_mib}")
    for check in checks:
        try:
            with open(os.path.expanduser(check["pidfile"])) as pidfile:
                os.kill(int(pidfile.read()), 0)
            continue  # this cluster's own process holds the port
        except (OSError, ValueError):
            pass
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, int(check["port"])))
            except OSError:
                found.append(f"port {check['port']} ({check['name']}) is in use on {address}")
    return found


if __name__ == "__main__":
    print("\n".join(problems(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]))))
