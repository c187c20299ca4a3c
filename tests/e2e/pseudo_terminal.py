"""Run a command with a pseudo-terminal as its stdin, stdout and stderr, as a person at a terminal would."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import time


def run_in_terminal(args: list[str], env: dict[str, str], cwd, timeout: float = 900,
                    columns: int = 120) -> tuple[int, str]:
    """(exit code, everything the terminal received, control characters included)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    process = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    else:
        process.kill()
    os.close(master)
    return process.wait(), b"".join(chunks).decode("utf-8", errors="replace")


def screen_lines(output: str) -> list[str]:
    """The lines a terminal ends up showing: each redrawn line in its last state, escapes removed."""
    lines = []
    for line in output.replace("\r\n", "\n").split("\n"):
        drawn = [part for part in line.split("\r") if part.strip()]
        lines.append(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", drawn[-1]) if drawn else "")
    return lines
