"""Patches: `ansible.plugins.action.ActionBase._remote_expand_user`, `._make_tmp_path`,
`._remote_chmod` and `._remove_tmp_path`, on the `local` connection without privilege escalation.
Knows: ansible-core 2.18 to 2.21 (the four methods have the same signatures and behaviour in both;
no version check).

A module task on the local connection makes a temporary directory for its module with four shell
commands besides the module itself: `echo ~user` (the home directory `remote_tmp` starts from),
`( umask 77 && mkdir -p <remote_tmp> && mkdir <remote_tmp>/ansible-tmp-... )`, `chmod u+x` and
`rm -f -r`. Each is a fork of the task's process and an exec of `/bin/sh` (twice: the local
connection runs `/bin/sh -c '/bin/sh -c ...'`) and of the commands: some 40 to 60 ms a task on a
two-core machine, the biggest part of what a `kubernetes.core` task adds to a warm run (its
action plugin asks for the directory even when the module is pipelined).

On the same machine, as the same user, each is the same system call made here instead:
`pwd`'s home directory, `mkdir` under umask 077, `chmod`, a recursive remove. Only where the
shell would do nothing else:
- the task's connection is Ansible's own `local` (that class, not a plugin that shadows it), its
  shell Ansible's own `sh`, and it has no `become`;
- the user's home is known (`~name` of an unknown user is left to the shell), and `remote_tmp`
  has no character the shell would expand or split (`$`, quotes, backslash, whitespace...);
- `chmod` is asked for `u+` with some of `r`, `w`, `x`;
- the directory to remove is a directory, not a link.
Anything else, and any error, goes to Ansible's own method, which runs the shell command as
before and reports what fails in its own words.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from typing import Any

#: A path the shell's `echo` would print as it is.
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9/._+@:,=-]+$")

#: The `chmod` modes taken here, and the bits they add.
_USER_MODE = re.compile(r"^u\+([rwx]+)$")
_BITS = {"r": stat.S_IRUSR, "w": stat.S_IWUSR, "x": stat.S_IXUSR}


def install() -> None:
    """In a playbook process: temporary directories of tasks on the local connection are made,
    changed and removed by this process."""
    from ansible.plugins.action import ActionBase
    from ansible.plugins.connection.local import Connection as Local
    from ansible.plugins.shell.sh import ShellModule as Sh

    def plain(action: Any) -> bool:
        connection = action._connection
        return type(connection) is Local and type(connection._shell) is Sh and not connection.become

    expand_user, make_tmp_path = ActionBase._remote_expand_user, ActionBase._make_tmp_path
    remote_chmod, remove_tmp_path = ActionBase._remote_chmod, ActionBase._remove_tmp_path

    def _remote_expand_user(self: Any, path: str, sudoable: bool = True, pathsep: Any = None) -> str:
        if plain(self) and path.startswith("~"):
            expanded = _expand_user(path, self._get_remote_user(), self._connection._shell)
            if expanded is not None:
                return expanded
        return expand_user(self, path, sudoable=sudoable, pathsep=pathsep)

    def _make_tmp_path(self: Any, remote_user: str | None = None) -> str:
        if plain(self):
            remote_tmp = self._remote_expand_user(self.get_shell_option("remote_tmp", default="~/.ansible/tmp"), sudoable=False)
            made = _make_tmp_dir(remote_tmp, self._connection._shell)
            if made is not None:
                self._cleanup_remote_tmp = True
                self._connection._shell.tmpdir = made
                return made
        return make_tmp_path(self, remote_user)

    def _remote_chmod(self: Any, paths: list[str], mode: str, sudoable: bool = False) -> dict[str, Any]:
        if plain(self) and _chmod(paths, mode):
            return {"rc": 0, "stdout": "", "stdout_lines": [], "stderr": "", "stderr_lines": []}
        return remote_chmod(self, paths, mode, sudoable=sudoable)

    def _remove_tmp_path(self: Any, tmp_path: str | None, force: bool = False) -> None:
        if plain(self):
            path = tmp_path if tmp_path is not None else self._connection._shell.tmpdir
            if path and not (force or self._should_remove_tmp_path(path)):
                return None
            if path and _remove_dir(path):
                self._connection._shell.tmpdir = None
                return None
        return remove_tmp_path(self, tmp_path, force=force)

    ActionBase._remote_expand_user = _remote_expand_user  # type: ignore[method-assign]
    ActionBase._make_tmp_path = _make_tmp_path  # type: ignore[method-assign]
    ActionBase._remote_chmod = _remote_chmod  # type: ignore[method-assign]
    ActionBase._remove_tmp_path = _remove_tmp_path  # type: ignore[method-assign]


def _expand_user(path: str, remote_user: str | None, shell: Any) -> str | None:
    """`~/x` or `~name/x` with the home directory in front, as Ansible's `echo ~name` gives it (the
    connection's user for a bare `~`); None when the shell should be asked."""
    first, _, rest = path.partition(os.path.sep)
    if first == "~":
        first = f"~{remote_user or ''}"
    home = os.path.expanduser(first)
    if home == first or not _PLAIN_PATH.match(home):
        return None
    expanded = shell.join_path(home, rest) if rest else home
    if ".." in os.path.dirname(expanded).split("/"):
        return None  # Ansible's own refuses it, in its words
    return str(expanded)


def _make_tmp_dir(remote_tmp: str, shell: Any) -> str | None:
    """`remote_tmp` (made if missing) and a new directory in it, both under umask 077, as the sh
    plugin's `mkdtemp` makes them; the new directory's path with a trailing slash, as Ansible keeps
    it. None when the shell should make it."""
    if not _PLAIN_PATH.match(remote_tmp) or not os.path.isabs(remote_tmp):
        return None
    path = shell.join_path(remote_tmp, shell._generate_temp_dir_name())
    umask = os.umask(0o077)
    try:
        os.makedirs(remote_tmp, exist_ok=True)
        os.mkdir(path)
    except OSError:
        return None
    finally:
        os.umask(umask)
    return str(shell.join_path(path, ""))


def _chmod(paths: list[str], mode: str) -> bool:
    """`chmod u+<bits>` of every path; False (nothing changed) when it should be the shell's."""
    wanted = _USER_MODE.match(mode)
    if wanted is None:
        return False
    bits = 0
    for letter in wanted.group(1):
        bits |= _BITS[letter]
    try:
        modes = [(path, os.stat(path).st_mode) for path in paths]
        for path, current in modes:
            os.chmod(path, stat.S_IMODE(current) | bits)
    except OSError:
        return False
    return True


def _remove_dir(path: str) -> bool:
    """`rm -f -r` of a temporary directory; False when it should be the shell's (not a directory
    of this process's making: a link, a file, or an error on the way)."""
    try:
        if os.path.islink(path.rstrip("/")) or not os.path.isdir(path):
            return not os.path.lexists(path.rstrip("/"))  # `rm -f` of nothing succeeds
        shutil.rmtree(path)
    except OSError:
        return False
    return True
