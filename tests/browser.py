"""Headless Chromium for tests: load a local HTML file, return its DOM and its console messages.

Chromium (Debian's ``chromium`` package in CI) runs with networking features off and
``--dump-dom``; with ``--enable-logging=stderr`` it writes every console message (console.log,
console.error and uncaught exceptions alike, all at INFO level) to stderr as

    [pid:tid:date/time:INFO:CONSOLE:12] "Uncaught ReferenceError: x is not defined", source: file:///... (12)

A report page carries no script, so any such line counts as an error.

Where no Chromium is installed, ``require_chromium()`` skips the test, except when the environment
variable ``CI`` is "true": there a missing browser fails the test.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
)
VIRTUAL_TIME_BUDGET_MS = 3000
TIMEOUT_S = 60.0
_CONSOLE = re.compile(r'CONSOLE[^\]]*\]\s*"(?P<msg>.*)", source: (?P<src>.*)$')


@dataclass(frozen=True)
class PageResult:
    dom: str  # the DOM serialized after load (--dump-dom)
    console_errors: list[str]  # console messages and uncaught exceptions, "message (source)"
    stderr: str


def find_chromium() -> str | None:
    """Path of the first Chromium/Chrome binary found, or None."""
    for name in CANDIDATES:
        path = name if os.path.isabs(name) and os.access(name, os.X_OK) else shutil.which(name)
        if path:
            return path
    return None


def require_chromium() -> str:
    """The Chromium binary; skips the calling test without one (fails it when CI=true)."""
    path = find_chromium()
    if path is None:
        message = (
            f"no Chromium found (looked for {', '.join(CANDIDATES)}); apt-get install -y chromium"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def console_errors(stderr: str) -> list[str]:
    """Console messages and uncaught exceptions from Chromium's stderr log."""
    out = []
    for line in stderr.splitlines():
        if "CONSOLE" not in line and "Uncaught" not in line:
            continue
        match = _CONSOLE.search(line)
        out.append(f"{match['msg']} ({match['src']})" if match else line.strip())
    return out


def load_page(
    html_file: Path, chromium: str | None = None, timeout_s: float = TIMEOUT_S
) -> PageResult:
    """Open ``html_file`` in headless Chromium; its DOM after load and its console errors."""
    binary = chromium or require_chromium()
    url = Path(html_file).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="gpudoctor-chromium-") as profile:
        cmd = [
            binary,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={VIRTUAL_TIME_BUDGET_MS}",
            "--dump-dom",
            url,
        ]
        stdout, stderr = _run(cmd, timeout_s)
    return PageResult(dom=stdout, console_errors=console_errors(stderr), stderr=stderr)


def _run(cmd: list[str], timeout_s: float) -> tuple[str, str]:
    # own process group, so that a hung browser and its helper processes can all be stopped
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(
            f"Chromium did not finish within {timeout_s:.0f} s (a script that opened alert() "
            f"blocks it: is some markup unescaped?): {' '.join(cmd)}"
        ) from None
    if proc.returncode != 0:
        raise AssertionError(f"Chromium exited with {proc.returncode}:\n{stderr[-4000:]}")
    return stdout, stderr
