"""bench/e2e.py's brokers: Mosquitto and Redis started on free loopback ports."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout:.0f} s")


@contextmanager
def broker(name: str, work: Path) -> Iterator[int | None]:
    """Start ``mosquitto`` or ``redis-server`` on a free loopback port; None if missing."""
    exe = "mosquitto" if name == "mosquitto" else "redis-server"
    path = shutil.which(exe) or next((f"{d}/{exe}" for d in ("/usr/sbin", "/usr/bin")
                                      if os.access(f"{d}/{exe}", os.X_OK)), None)
    if path is None:
        print(f"{exe} is not installed: {name} skipped", flush=True)
        yield None
        return
    port = free_port()
    if name == "mosquitto":
        conf = work / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\n")
        argv = [path, "-c", str(conf)]
    else:
        argv = [path, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(work)]
    with open(work / f"{name}.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_port(port, proc, exe)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
