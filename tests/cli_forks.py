"""`memoryd` commands as processes forked from one warmed-up interpreter, for the README run
and the team end-to-end test's many CLI calls.

A fresh `python -m memoryd …` spends about a second importing memoryd before the command
starts, and an embedded `record` seconds more building the extraction pipelines; the README
runs some 60 commands. `serve` imports the CLI and builds the shared extractor once, then
forks one child per command. `shim` is the `memoryd` on the shell's PATH: it hands its stdin,
stdout and stderr, its arguments, environment and working directory to the server and exits
with the child's status. Each command is still its own process with its own descriptors, and
runs the console script's entry point (`memoryd.entry.main`) from the start.

    python -m tests.cli_forks serve SOCKET
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import memoryd

SHIM = """#!{python} -IS
import json, os, socket, sys
sock = socket.socket(socket.AF_UNIX)
sock.connect({socket!r})
request = json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}})
data = request.encode()
socket.send_fds(sock, [len(data).to_bytes(4, "big") + data], [0, 1, 2])
status = b""
while len(status) < 4:
    chunk = sock.recv(4 - len(status))
    if not chunk:
        sys.exit("memoryd: the command server went away")
    status += chunk
sys.exit(int.from_bytes(status, "big", signed=True))
"""


def write_shim(path: Path, server_socket: Path) -> None:
    """A `memoryd` executable at `path` that runs each command through the server."""
    path.write_text(SHIM.format(python=sys.executable, socket=str(server_socket)))
    path.chmod(0o755)


@contextlib.contextmanager
def forked_commands(
    shim: Path, server_socket: Path, env: Mapping[str, str], cwd: Path | None = None
) -> Iterator[Path]:
    """A command server (`serve`) on `server_socket` started with `env`, and a `memoryd`
    executable at `shim` that runs each command through it; the server is killed on exit."""
    write_shim(shim, server_socket)
    checkout = str(Path(__file__).resolve().parents[1])  # for `tests.cli_forks` itself
    path = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), checkout]))
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.cli_forks", "serve", str(server_socket)],
        cwd=cwd,
        env={**env, "PYTHONPATH": path},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline() == "ready\n", "the command server did not start"
        yield shim
    finally:
        server.kill()
        server.wait(timeout=30)
        assert server.stdout is not None
        server.stdout.close()


def _receive(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 65536, 3)
    if len(data) < 4 or len(fds) != 3:
        raise ConnectionError("a malformed request")
    size = int.from_bytes(data[:4], "big")
    data = data[4:]
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("a request cut short")
        data += chunk
    return json.loads(data), fds


def _run_child(listener: socket.socket, request: dict[str, object], fds: list[int]) -> None:
    """In the forked child: become the command's process, run it, never return."""
    code = 1
    try:
        listener.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir(str(request["cwd"]))
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update(env)
        argv = request["argv"]
        assert isinstance(argv, list)
        sys.argv = [str(Path(memoryd.__file__).with_name("__main__.py")), *argv]
        from memoryd.entry import main

        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if isinstance(exc.code, str):
                print(exc.code, file=sys.stderr)
        atexit._run_exitfuncs()
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def serve(path: Path) -> None:
    """Warm up, then fork a child per command until killed. Only this thread forks; a thread
    per command waits for its child, so commands piped into each other run side by side."""
    import memoryd.cli.main  # noqa: F401  (what every command imports first)
    from memoryd.wiring import shared_extractor

    shared_extractor(None).warm_up()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(8)
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        try:
            request, fds = _receive(conn)
        except (ConnectionError, ValueError):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            conn.close()
            _run_child(listener, request, fds)
        for fd in fds:
            os.close(fd)
        threading.Thread(target=_answer, args=(conn, pid), daemon=True).start()


def _answer(conn: socket.socket, pid: int) -> None:
    """Wait for the command's process and send its exit status (128 + N: killed by N)."""
    with conn:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        conn.sendall((code if code >= 0 else 128 - code).to_bytes(4, "big", signed=True))


if __name__ == "__main__":
    if sys.argv[1:2] != ["serve"] or len(sys.argv) != 3:
        sys.exit("usage: python -m tests.cli_forks serve SOCKET")
    serve(Path(sys.argv[2]))
