"""The gallery's public programs: the manifest entries, scripts/fetch_gallery_public.py (re-creates
.gallery-public/ from git snapshots at the recorded commit) and the runner's timing helpers
(benchmarks/run_gallery.py: timing_scale, plain_stop_s)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from script_module import load
from sigint import ignore_sigint

from gpudoctor.capture.detect import Source
from gpudoctor.rules.registry import RULES

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = json.loads((ROOT / "tests" / "programs" / "manifest.json").read_text())
PUBLIC = [e for e in MANIFEST["public"] if e.get("enabled", True)]


fetch = load("fetch_gallery_public", "scripts")
sys.path.insert(0, str(ROOT / "benchmarks"))
run_gallery = load("run_gallery")


@pytest.mark.parametrize("entry", PUBLIC, ids=[e["name"] for e in PUBLIC])
def test_public_entry_is_complete(entry: dict) -> None:
    """Everything the fetch script and the runners read is there and means something."""
    assert re.fullmatch(r"github:[\w.-]+/[\w.-]+", entry["source"])
    assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"])
    assert entry["dir"].startswith(".gallery-public/")
    dests = [d for _, _, d in fetch.plan(entry)]
    assert entry["file"] in dests
    # a repository without a licence file says so; it is run here, never committed
    assert "LICENSE" in dests or len(entry.get("licence_note", "")) > 20
    for source, commit in entry.get("commits", {}).items():
        assert source.startswith("github:") and re.fullmatch(r"[0-9a-f]{40}", commit)
    known = set(RULES) | {"healthy"}
    assert set(entry["expected_top_finding"]) <= known, set(entry["expected_top_finding"]) - known
    assert entry.get("step_source") in {None, *(s.value for s in Source)}
    assert entry.get("timing_scale", 1) > 0 and entry.get("plain_stop_s", 1) > 0
    assert len(entry["notes"]) > 80  # the expectation and why, written before the run


def test_public_dirs_are_distinct() -> None:
    dirs = [e["dir"] for e in MANIFEST["public"]]
    assert len(dirs) == len(set(dirs))


def test_plan_maps_files_and_other_repositories() -> None:
    entry = next(e for e in PUBLIC if e["name"] == "lightning_transformer_wikitext")
    assert fetch.plan(entry) == [
        (
            "github:Lightning-AI/pytorch-lightning",
            "examples/pytorch/basics/transformer.py",
            "transformer.py",
        ),
        ("github:Lightning-AI/pytorch-lightning", "LICENSE", "LICENSE"),
        (
            "github:pytorch/examples",
            "word_language_model/data/wikitext-2/valid.txt",
            "data/wikitext-2.txt",
        ),
    ]


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


@pytest.fixture
def two_commits(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository whose first commit has ex/main.py = 'v1' and whose HEAD has 'v2'."""
    repo = tmp_path / "upstream"
    (repo / "ex").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "LICENSE").write_text("license\n")
    (repo / "ex" / "main.py").write_text("v1\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "ex" / "main.py").write_text("v2\n")
    _git(repo, "commit", "-qam", "two")
    return repo / ".git", first, _git(repo, "rev-parse", "HEAD")


def _entry(commit: str, files: list[str]) -> dict:
    return {
        "name": "t",
        "source": "github:o/up",
        "commit": commit,
        "source_dir": "ex",
        "dir": ".gallery-public/t",
        "file": "main.py",
        "files": files,
        "files_from": {"LICENSE": "LICENSE"},
    }


def test_fetch_takes_the_recorded_commit(
    two_commits: tuple[Path, str, str], tmp_path: Path
) -> None:
    git_dir, first, _ = two_commits
    out = tmp_path / "checkout"
    assert (
        fetch.fetch_entry(_entry(first, ["main.py"]), out, {"github:o/up": git_dir}, [], head=False)
        == []
    )
    assert (out / ".gallery-public/t/main.py").read_text() == "v1\n"
    assert (out / ".gallery-public/t/LICENSE").read_text() == "license\n"
    assert (out / ".gallery-public/t/COMMIT").read_text() == first + "\n"


def test_fetch_names_a_missing_file(two_commits: tuple[Path, str, str], tmp_path: Path) -> None:
    git_dir, first, _ = two_commits
    problems = fetch.fetch_entry(
        _entry(first, ["main.py", "data/train.txt"]),
        tmp_path,
        {"github:o/up": git_dir},
        [],
        head=False,
    )
    assert problems == [f"t: github:o/up {first[:12]} has no ex/data/train.txt"]


def test_fetch_refuses_an_unknown_commit_unless_head(
    two_commits: tuple[Path, str, str], tmp_path: Path
) -> None:
    git_dir, _, head = two_commits
    with pytest.raises(SystemExit, match=r"lacks commit 0{40}; fetch that commit, or pass --head"):
        fetch.fetch_entry(
            _entry("0" * 40, ["main.py"]), tmp_path, {"github:o/up": git_dir}, [], head=False
        )
    assert (
        fetch.fetch_entry(
            _entry("0" * 40, ["main.py"]), tmp_path, {"github:o/up": git_dir}, [], head=True
        )
        == []
    )
    assert (tmp_path / ".gallery-public/t/main.py").read_text() == "v2\n"
    assert (tmp_path / ".gallery-public/t/COMMIT").read_text() == head + "\n"


def test_fetch_finds_a_mirror_folder(two_commits: tuple[Path, str, str], tmp_path: Path) -> None:
    git_dir, _, _ = two_commits
    mirrors = tmp_path / "mirrors"
    (mirrors / "o+up").mkdir(parents=True)
    (mirrors / "o+up" / "repo").symlink_to(git_dir)
    assert fetch.find_git_dir("github:o/up", {}, [mirrors]) == mirrors / "o+up" / "repo"
    assert fetch.find_git_dir("github:o/other", {}, [mirrors]) is None


def test_parse_ms_scales_seconds_and_drops_the_first_line() -> None:
    text = "Time  1.500 ( 1.500)\nTime  0.120 ( 0.8)\nTime  0.100 ( 0.5)\nTime  0.110 ( 0.4)\n"
    ms, values = run_gallery.parse_ms(text, r"Time\s+([0-9]+(?:\.[0-9]+)?) \(", 1000)
    assert values == [1500.0, 120.0, 100.0, 110.0]
    assert ms == 110.0


LOOP = "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.05)\n"


def test_run_command_stops_an_endless_program_with_ctrl_c(tmp_path: Path) -> None:
    res = run_gallery.run_command(
        [sys.executable, "-c", LOOP], tmp_path, dict(os.environ), 30, interrupt_after=1.0
    )
    assert res["interrupted"] and not res["timed_out"]
    assert res["rc"] == -2  # Python's uncaught KeyboardInterrupt ends the process by SIGINT
    assert res["stdout"].count("tick") >= 5 and "KeyboardInterrupt" in res["stderr"]


def test_run_command_stops_an_endless_program_with_ctrl_c_when_started_with_sigint_ignored(
    tmp_path: Path,
) -> None:
    """The runner started as a script's background job (SIGINT ignored, and every child inherits that:
    a Python child then installs no KeyboardInterrupt handler): its Ctrl-C still stops the program."""
    parent = "\n".join(
        [
            "import json, os, signal, sys",
            f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})",
            "import run_gallery",
            f"res = run_gallery.run_command([sys.executable, '-c', {LOOP!r}], {str(tmp_path)!r}, dict(os.environ), 300,",
            "                               interrupt_after=1.0)",
            "res['parent_ignored_sigint'] = signal.getsignal(signal.SIGINT) is signal.SIG_IGN",
            "print(json.dumps(res))",
        ]
    )
    out = subprocess.run(
        [sys.executable, "-c", parent],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=ignore_sigint,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["parent_ignored_sigint"]  # the scenario: the runner itself takes no Ctrl-C
    assert res["interrupted"] and not res["timed_out"]
    assert res["rc"] == -2 and "KeyboardInterrupt" in res["stderr"]
    assert res["stdout"].count("tick") >= 5


def test_run_command_kills_a_program_that_ignores_ctrl_c(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_gallery, "INTERRUPT_GRACE_S", 0.5)
    deaf = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n" + LOOP
    res = run_gallery.run_command(
        [sys.executable, "-c", deaf], tmp_path, dict(os.environ), 30, interrupt_after=0.5
    )
    assert res["interrupted"] and res["timed_out"] and res["rc"] == -9


def test_synthetic_mnist_has_the_real_files_sizes_and_format(tmp_path: Path) -> None:
    """What torchvision's MNIST reads from raw/: big-endian IDX headers, uint8 bodies, 60k + 10k."""
    import numpy as np

    entry = {"name": "m", "dir": "prog", "synthetic": {"../data/MNIST/raw": "mnist-idx"}}
    assert fetch.make_synthetic(entry, tmp_path) == []
    raw = tmp_path / "data" / "MNIST" / "raw"
    images = (raw / "train-images-idx3-ubyte").read_bytes()
    assert images[:16] == bytes.fromhex("00000803 0000ea60 0000001c 0000001c")
    assert len(images) == 16 + 60_000 * 28 * 28
    labels = np.frombuffer((raw / "t10k-labels-idx1-ubyte").read_bytes()[8:], dtype=np.uint8)
    assert (raw / "t10k-labels-idx1-ubyte").read_bytes()[:8] == bytes.fromhex("00000801 00002710")
    assert len(labels) == 10_000 and set(np.unique(labels)) == set(range(10))


def test_synthetic_cora_reads_the_way_the_graph_examples_read_it(tmp_path: Path) -> None:
    """pytorch/examples' gcn and gat parse cora.content with np.genfromtxt as strings (id, 1,433
    flags, class) and map every citation's two ids through the content's ids."""
    import numpy as np

    synthetic = {"cora": "cora", ".": "requests-from-disk"}
    entry = {"name": "g", "dir": "prog", "synthetic": synthetic}
    assert fetch.make_synthetic(entry, tmp_path) == []
    content = np.genfromtxt(tmp_path / "prog" / "cora" / "cora.content", dtype=np.dtype(str))
    cites = np.genfromtxt(tmp_path / "prog" / "cora" / "cora.cites", dtype=np.int32)
    assert content.shape == (2708, 1435) and cites.shape == (5429, 2)
    flags = content[:, 1:-1].astype(np.int32)
    assert set(np.unique(flags)) == {0, 1} and (flags.sum(axis=1) == 18).all()
    assert len(np.unique(content[:, -1])) == 7
    ids = set(content[:, 0].astype(np.int32).tolist())
    assert len(ids) == 2708 and set(cites.ravel().tolist()) <= ids
    # gcn downloads Cora every run: the stand-in requests.py answers with a .tgz of the files
    unpack = tmp_path / "unpacked"
    unpack.mkdir()
    script = (
        "import requests, tarfile\n"
        "with requests.get('https://example.invalid/cora.tgz', stream=True) as r:\n"
        f"    tarfile.open(fileobj=r.raw, mode='r:gz').extractall({str(unpack)!r})\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path / "prog", check=False)
    assert done.returncode == 0
    served = unpack / "cora" / "cora.cites"
    assert served.read_bytes() == (tmp_path / "prog" / "cora" / "cora.cites").read_bytes()


def test_synthetic_names_an_unknown_kind_and_prepare_a_failing_step(tmp_path: Path) -> None:
    entry = {"name": "m", "dir": "prog", "synthetic": {"data": "cifar"}}
    assert fetch.make_synthetic(entry, tmp_path) == [
        ("m: unknown synthetic kind 'cifar' (known: mnist-idx, cora, requests-from-disk, "
         "tensorboard-optional)")
    ]
    (tmp_path / "prog").mkdir()
    (tmp_path / "prog" / "prep.py").write_text("open('made.txt', 'w').write('x')\n")
    ok = {"name": "m", "dir": "prog", "prepare": [["python", "prep.py"]]}
    assert fetch.run_prepare(ok, tmp_path) == []
    assert (tmp_path / "prog" / "made.txt").read_text() == "x"
    bad = {"name": "m", "dir": "prog", "prepare": [["python", "-c", "raise SystemExit('no data')"]]}
    assert fetch.run_prepare(bad, tmp_path) == [
        "m: python -c raise SystemExit('no data') exited 1: no data"
    ]


@pytest.mark.parametrize("installed", [True, False])
def test_a_summary_writer_is_dropped_only_where_tensorboard_cannot_be_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed: bool
) -> None:
    program = tmp_path / "prog.py"
    source = (
        "import os\nfrom torch.utils.tensorboard import SummaryWriter\n"
        "w = SummaryWriter(log_dir='out')\nw.add_scalar('loss', 1.0, 0)\nw.flush()\nprint('ran')\n"
    )
    program.write_text(source)
    # None in sys.modules makes the import fail; a module object makes it succeed
    stand_in = types.ModuleType("torch.utils.tensorboard") if installed else None
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", stand_in)
    fetch.make_synthetic({"name": "p", "dir": ".", "synthetic": {"prog.py": "tensorboard-optional"}},
                         tmp_path)
    text = program.read_text()
    if installed:
        assert text == source
        return
    assert "from torch.utils.tensorboard" not in text and "class SummaryWriter" in text
    done = subprocess.run([sys.executable, str(program)], cwd=tmp_path, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0 and done.stdout == "ran\n"
