"""What a forked process does to look like a freshly exec'd interpreter: signal dispositions,
standard streams, environment, open file descriptors, and the way it exits."""

from __future__ import annotations

import atexit
import ctypes
import io
import locale
import os
import pickle
import resource
import signal
import sys
import traceback
from collections.abc import Callable, Collection, Mapping
from typing import Any, NoReturn

_PR_SET_DUMPABLE = 4
_PR_SET_NAME = 15
_PR_SET_CHILD_SUBREAPER = 36

#: `sys.path` as the interpreter set it up, without its first entry (the directory of the script,
#: or the working directory for `-m`): a process that becomes `python <script>` puts the script's
#: directory in front. Set by the zygote before anything else changes `sys.path`.
BASE_SYS_PATH: list[str] = []


def reset_signals() -> None:
    """Signal dispositions as after exec() and Python's start-up: handlers back to the default,
    ignored signals stay ignored, SIGINT raises KeyboardInterrupt, SIGPIPE and SIGXFSZ ignored."""
    signal.set_wakeup_fd(-1)
    for signum in signal.valid_signals():
        handler = signal.getsignal(signum)
        if callable(handler):
            try:
                signal.signal(signum, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
    if signal.getsignal(signal.SIGINT) == signal.SIG_DFL:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def redirect(stdin: int, stdout: int, stderr: int) -> None:
    """Makes the given descriptors this process's 0, 1 and 2."""
    for target, fd in enumerate((stdin, stdout, stderr)):
        if fd != target:
            os.dup2(fd, target)


def standard_streams() -> None:
    """New `sys.stdin`, `sys.stdout` and `sys.stderr` over descriptors 0, 1 and 2, made the way
    CPython makes them at start-up (`output_streams`). The inherited objects may hold buffered text
    of the parent and were made for its descriptors."""
    encoding, errors = _encoding()
    stdin = _text_stream(io.FileIO(0, "rb", closefd=False), "r", encoding, errors, line_buffering=False, unbuffered=False)
    stdout, stderr = output_streams(
        io.FileIO(1, "wb", closefd=False), io.FileIO(2, "wb", closefd=False), terminal=os.isatty(1)
    )
    sys.stdin = sys.__stdin__ = stdin
    sys.stdout = sys.__stdout__ = stdout
    sys.stderr = sys.__stderr__ = stderr


def output_streams(
    stdout: io.RawIOBase, stderr: io.RawIOBase, *, terminal: bool
) -> tuple[io.TextIOWrapper, io.TextIOWrapper]:
    """Text streams for standard output and error over these raw ones, made the way CPython makes
    them at start-up: encoding and error handlers as this interpreter's, stdout line-buffered on a
    terminal, stderr with backslashreplace and line-buffered, both unbuffered under
    PYTHONUNBUFFERED (the environment they are made in counts, as the interpreter's at its start)."""
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    encoding, errors = _encoding()
    return (
        _text_stream(stdout, "w", encoding, errors, line_buffering=terminal, unbuffered=unbuffered),
        _text_stream(stderr, "w", encoding, "backslashreplace", line_buffering=True, unbuffered=unbuffered),
    )


def _encoding() -> tuple[str, str]:
    """The encoding and error handler this interpreter made its standard output with."""
    if sys.__stdout__ is None:
        return "utf-8", "strict"
    return sys.__stdout__.encoding, sys.__stdout__.errors or "strict"


def _text_stream(
    raw: io.RawIOBase, mode: str, encoding: str, errors: str, *, line_buffering: bool, unbuffered: bool
) -> io.TextIOWrapper:
    buffer: io.BufferedIOBase | io.RawIOBase
    if unbuffered and mode == "w":
        buffer = raw
    elif mode == "r":
        buffer = io.BufferedReader(raw)
    else:
        buffer = io.BufferedWriter(raw)
    stream = io.TextIOWrapper(
        buffer,  # type: ignore[arg-type]
        encoding=encoding,
        errors=errors,
        newline="\n",
        line_buffering=line_buffering,
        write_through=unbuffered and mode == "w",
    )
    stream.mode = mode  # type: ignore[misc]
    return stream


#: What CPython sets LC_CTYPE to when it starts in the C locale (PEP 538), the first it can use.
_COERCION_TARGETS = ("C.UTF-8", "C.utf8", "UTF-8")


def start_locale() -> None:
    """The locale and LC_CTYPE as CPython sets them at start-up from the current environment: in the
    C or POSIX locale, without LC_ALL and unless PYTHONCOERCECLOCALE is 0, it sets LC_CTYPE to the
    first UTF-8 locale it can use (PEP 538), which the processes it starts inherit. A run started
    cold gets that from ansible-runner's start; a run forked from the worker gets it here."""
    try:
        current = locale.setlocale(locale.LC_CTYPE, "")
    except locale.Error:  # a locale not installed: the C locale, as in a started interpreter
        current = locale.setlocale(locale.LC_CTYPE, "C")
    if current not in ("C", "POSIX") or os.environ.get("LC_ALL") or os.environ.get("PYTHONCOERCECLOCALE") == "0":
        return
    for target in _COERCION_TARGETS:
        try:
            locale.setlocale(locale.LC_CTYPE, target)
        except locale.Error:
            continue
        os.environ["LC_CTYPE"] = target
        return


def replace_environment(env: Mapping[str, str]) -> None:
    """`os.environ` (and the C environment) becomes exactly `env`. Only what differs is changed: a
    run's environment is mostly the worker's, and emptying and refilling some hundred variables
    (an unsetenv and a putenv each) takes half a millisecond, four times a run."""
    for name in [name for name in os.environ if name not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def close_descriptors_from(lowest: int, keep: Collection[int | None] = ()) -> None:
    """Closes every descriptor from `lowest` up but those in `keep`, as exec() with close-on-exec
    everywhere else would."""
    highest = min(1 << 20, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    for fd in sorted(fd for fd in keep if fd is not None and fd >= lowest):
        os.closerange(lowest, fd)
        lowest = fd + 1
    os.closerange(lowest, highest)


def set_name(program: str) -> None:
    """The process name (`/proc/<pid>/comm`, what `ps` and `top` show) that exec'ing `program`
    would have given: its file name, cut to 15 bytes."""
    name = os.path.basename(program).encode()[:15]
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def set_dumpable(dumpable: bool) -> None:
    """Whether processes of this user may attach to this one (ptrace, /proc/<pid>/mem) and it
    dumps core; a fork inherits it, exec resets it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, int(dumpable), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE)")


def become_subreaper() -> None:
    """Orphaned descendants are reparented to this process instead of init, so the process tree
    of a run stays below the run for the operator to find and end."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def exit_status(exit: SystemExit) -> int:
    """The status the interpreter exits with for this SystemExit, printing a message as it would."""
    code = exit.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_main(main: object) -> int:
    """Calls `main()` as the interpreter runs a script: SystemExit gives the status, any other
    exception is printed with its traceback and gives 1."""
    try:
        result = main()  # type: ignore[operator]
    except SystemExit as exit:
        return exit_status(exit)
    except BaseException:  # noqa: BLE001 - the interpreter reports every escaping exception
        traceback.print_exc()
        return 1
    return exit_status(SystemExit(result))


def at_exit(status: int) -> int:
    """What the interpreter does at the end of a script before it exits: the `atexit` handlers
    run, then the standard streams flushed; the status it then exits with (120 when a flush
    failed)."""
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - atexit reports its own errors
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:  # noqa: BLE001
            status = status or 120
    return status


def finish(status: int, report: Callable[[int], None] | None = None) -> NoReturn:
    """Exits as the interpreter does at the end of a script: atexit handlers, then the standard
    streams flushed (a failed flush makes the status 120), then _exit.

    `report`, when given, is told the final status and the standard descriptors are closed before
    _exit: a forked interpreter gives its memory back after _exit, which takes milliseconds (some
    5 ms for a playbook process), and whoever waits for this process's status or the end of its
    output need not wait for that."""
    status = at_exit(status)
    if report is not None:
        try:
            report(status)
        except OSError:
            pass  # the one told is gone; the status reaches whoever reaps this process
        for fd in (0, 1, 2):
            try:
                os.close(fd)
            except OSError:
                pass
    os._exit(status)


def descendants(root: int) -> list[int]:
    """Every living descendant of `root`, from the parent links in `/proc/<pid>/stat`."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat = file.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 1 :].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    queue = [root]
    while queue:
        for child in children.get(queue.pop(), []):
            if child not in found:
                found.append(child)
                queue.append(child)
    return found


def fork_writing(write: Callable[[], bytes]) -> tuple[int, int] | None:
    """Forks a child that sends `write()`'s bytes down a pipe and exits (1 when `write` raised):
    its pid and the pipe's read end (close-on-exec), or None when it could not be forked."""
    read, fd = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(fd)
        return None
    if pid == 0:
        status = 1
        try:
            os.close(read)
            data = write()
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(fd)
    return pid, read


def computed_in_child(compute: Callable[[], Any]) -> Any:
    """What `compute()` returns, computed in a forked child and handed back pickled. Work that
    parses or loads much leaves the heap of the process that did it fragmented (megabytes Python
    does not give back), and the worker's heap is what every run shares: only the result comes
    back. None when the child could not be forked or failed (the caller then does without, or
    computes in place)."""
    forked = fork_writing(lambda: pickle.dumps(compute()))
    if forked is None:
        return None
    pid, read = forked
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not data:
        return None
    return pickle.loads(data)
