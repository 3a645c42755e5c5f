"""File names that are not UTF-8 (a Latin-1 ``tr\\xe9ce.json.gz`` on a UTF-8 Linux system): read, named
in the console, the JSON and the HTML page as ``tr\\xe9ce.json.gz``, the page written under its own name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
SRC = Path(__file__).parent.parent / "src"
TRACE = b"tr\xe9ce.json.gz"  # Latin-1 e-acute: no UTF-8 decodes this byte
PAGE = b"r\xe9p.html"
SHOWN = "tr\\xe9ce.json.gz"  # how every output names it: the byte, escaped

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or sys.getfilesystemencoding() != "utf-8",
    reason="bytes file names that are not UTF-8: a Linux file system in a UTF-8 locale",
)


def gd(*args: str | bytes, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    # stdout and stderr strict UTF-8: a lone surrogate printed would fail, not be smuggled out as a raw byte
    env = dict(
        os.environ,
        PYTHONPATH=str(SRC),
        COLUMNS="120",
        LC_ALL="C.UTF-8",
        PYTHONIOENCODING="utf-8:strict",
    )
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", *args],
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.fixture
def trace(tmp_path: Path) -> bytes:
    target = os.path.join(os.fsencode(tmp_path), TRACE)
    shutil.copyfile(DATA / "host_sync" / "trace.json.gz", target)
    return target


def test_html_page_with_undecodable_names(tmp_path: Path, trace: bytes) -> None:
    out = gd("analyze", trace, "--html", PAGE, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    stdout, stderr = out.stdout.decode("utf-8"), out.stderr.decode("utf-8")  # strict: valid UTF-8
    assert f"trace     {os.fsdecode(tmp_path)}/{SHOWN}" in stdout
    assert stderr.strip() == "HTML report written to r\\xe9p.html"
    page = (tmp_path / os.fsdecode(PAGE)).read_bytes().decode("utf-8")
    assert f"trace <code>{os.fsdecode(tmp_path)}/{SHOWN}</code>" in page


def test_json_source_is_valid_utf8(tmp_path: Path, trace: bytes) -> None:
    out = gd("analyze", trace, "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode("utf-8")
    assert "\\ud" not in text  # no lone surrogate, not even escaped
    report = json.loads(text)
    assert report["source"] == f"{os.fsdecode(tmp_path)}/{SHOWN}"
    assert report["findings"][0]["id"] == "host-sync"


def test_missing_undecodable_name_is_one_line(tmp_path: Path) -> None:
    out = gd("analyze", b"absent-" + TRACE, "--json", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stdout == b""
    assert out.stderr.decode("utf-8").startswith("error: absent-tr\\xe9ce.json.gz does not exist; ")
