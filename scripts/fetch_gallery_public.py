"""Re-create .gallery-public/ (the gallery's public programs, never committed) from git snapshots.

    python scripts/fetch_gallery_public.py --git-dir github:pytorch/examples=PATH/examples.git \\
        --git-dir github:Lightning-AI/pytorch-lightning=PATH/lightning.git [--only NAME] [--head]
    python scripts/fetch_gallery_public.py --mirrors DIR      # DIR/<owner>+<name>/repo, DIR/<name>.git, DIR/<name>
    python scripts/fetch_gallery_public.py --mirrors DIR --dest OTHER_CHECKOUT

Each "public" entry of tests/programs/manifest.json names its ``source`` repository, the ``commit``
its files were read at, the ``source_dir`` inside it, the ``files`` (relative to source_dir, copied
to the same relative path under ``dir``) and ``files_from`` ({path under dir: path in the
repository}, or "github:owner/name:path" for a file of another repository: a LICENSE at the
root, a data file standing in for one the snapshot lacks). Files are read with
``git --git-dir=GITDIR show COMMIT:PATH`` (no work tree needed; a bare clone or a snapshot will
do); ``dir/COMMIT`` records the commit. A snapshot that lacks the recorded commit is refused
unless ``--head`` takes its HEAD instead (the entry's expectations were written for that commit).
Entries with ``"enabled": false`` or no files are skipped. Exit code 1 when a file is missing.

``synthetic`` ({folder under dir: kind}) stands in for a dataset the program would download, written
here because no snapshot holds it: ``mnist-idx`` writes MNIST's four files (60,000 + 10,000 random
28 x 28 images and labels, in the IDX format torchvision's ``MNIST`` reads from ``raw/``; 55 MB, so
``--synthetic-only`` writes them on the machine that runs the programs); ``tensorboard-optional``
names a program file whose SummaryWriter is dropped where tensorboard is not installed.
``prepare`` (argv lists)
runs in dir after the files are copied, as the program's README says to (nanoGPT's prepare.py).
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "tests" / "programs" / "manifest.json"


def plan(entry: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(source repository, path in it, path under dir) for every file of one entry."""
    base = entry.get("source_dir", "").strip("/")
    rows = [(entry["source"], f"{base}/{f}" if base else f, f) for f in entry.get("files", [])]
    for dest, origin in entry.get("files_from", {}).items():
        if origin.startswith("github:"):
            source, _, path = origin.rpartition(":")
            rows.append((source, path, dest))
        else:
            rows.append((entry["source"], origin, dest))
    return rows


def find_git_dir(source: str, given: dict[str, Path], mirrors: list[Path]) -> Path | None:
    if source in given:
        return given[source]
    owner, name = source.removeprefix("github:").split("/", 1)
    for m in mirrors:
        for cand in (
            m / f"{owner}+{name}" / "repo",
            m / f"{name}.git",
            m / name / ".git",
            m / name,
        ):
            if (cand / "HEAD").is_file() or (cand / "objects").is_dir():
                return cand
    return None


def git(git_dir: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, check=False)


def resolve_commit(git_dir: Path, wanted: str | None, head: bool) -> str:
    if wanted and git(git_dir, "cat-file", "-e", f"{wanted}^{{commit}}").returncode == 0:
        return wanted
    if wanted and not head:
        raise SystemExit(
            f"error: {git_dir} lacks commit {wanted}; fetch that commit, or pass --head to take HEAD"
        )
    return git(git_dir, "rev-parse", "HEAD").stdout.decode().strip()


def fetch_entry(
    entry: dict[str, Any], root: Path, given: dict[str, Path], mirrors: list[Path], head: bool
) -> list[str]:
    """Copy one entry's files under ``root``; the problems found (empty when every file was written)."""
    problems: list[str] = []
    dest_dir = root / entry["dir"]
    commits: dict[str, str] = {}
    for source, path, dest in plan(entry):
        git_dir = find_git_dir(source, given, mirrors)
        if git_dir is None:
            problems.append(
                f"{entry['name']}: no git dir for {source} (pass --git-dir {source}=PATH)"
            )
            continue
        wanted = (
            entry.get("commit")
            if source == entry["source"]
            else entry.get("commits", {}).get(source)
        )
        if source not in commits:
            commits[source] = resolve_commit(git_dir, wanted, head)
        blob = git(git_dir, "show", f"{commits[source]}:{path}")
        if blob.returncode != 0:
            problems.append(f"{entry['name']}: {source} {commits[source][:12]} has no {path}")
            continue
        target = dest_dir / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob.stdout)
    if commits:
        dest_dir.mkdir(parents=True, exist_ok=True)
        (dest_dir / "COMMIT").write_text(
            commits[entry["source"]] + "\n"
            if len(commits) == 1
            else "".join(f"{s} {c}\n" for s, c in sorted(commits.items()))
        )
    return problems


MNIST_FILES = {  # file name: (IDX magic number, item count, item shape)
    "train-images-idx3-ubyte": (2051, 60_000, (28, 28)),
    "train-labels-idx1-ubyte": (2049, 60_000, ()),
    "t10k-images-idx3-ubyte": (2051, 10_000, (28, 28)),
    "t10k-labels-idx1-ubyte": (2049, 10_000, ()),
}


def write_mnist_idx(folder: Path, seed: int = 0) -> None:
    """MNIST's raw files with random pixels and labels (labels 0-9): the sizes and format of the
    real ones, so a program's loader does the same work per sample."""
    import numpy as np

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for name, (magic, count, shape) in MNIST_FILES.items():
        dims = (count, *shape)
        high = 256 if shape else 10
        body = rng.integers(0, high, size=dims, dtype=np.uint8).tobytes()
        header = struct.pack(f">I{len(dims)}I", magic, *dims)
        (folder / name).write_bytes(header + body)


CORA_SHAPE = {"papers": 2708, "words": 1433, "words_per_paper": 18, "cites": 5429}
CORA_CLASSES = (
    "Case_Based",
    "Genetic_Algorithms",
    "Neural_Networks",
    "Probabilistic_Methods",
    "Reinforcement_Learning",
    "Rule_Learning",
    "Theory",
)


def write_cora(folder: Path, seed: int = 0) -> None:
    """Cora's two files (``cora.content``: paper id, 1,433 binary word flags, class name;
    ``cora.cites``: cited and citing paper ids) with random words, classes and citations in the
    real counts (2,708 papers, ~18 words each, 5,429 citations), so a program builds graphs of the
    real sizes and sparsity."""
    import numpy as np

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    papers = rng.choice(1_200_000, size=CORA_SHAPE["papers"], replace=False) + 35
    rows = []
    for paper in papers:
        flags = np.zeros(CORA_SHAPE["words"], dtype=np.int8)
        flags[
            rng.choice(CORA_SHAPE["words"], size=CORA_SHAPE["words_per_paper"], replace=False)
        ] = 1
        label = CORA_CLASSES[rng.integers(len(CORA_CLASSES))]
        rows.append(f"{paper}\t" + "\t".join(map(str, flags)) + f"\t{label}\n")
    (folder / "cora.content").write_text("".join(rows))
    ends = rng.choice(papers, size=(CORA_SHAPE["cites"], 2))
    (folder / "cora.cites").write_text("".join(f"{a}\t{b}\n" for a, b in ends))


REQUESTS_FROM_DISK = '''"""A stand-in for the requests package, written beside a public program by
scripts/fetch_gallery_public.py: the lent GPUs have no network, so the program's one download
(a .tgz of the folder named in FOLDERS) is served from the synthetic files already on disk."""
import io
import tarfile

FOLDERS = {folders!r}


class _Response:
    def __init__(self, raw):
        self.raw = raw

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def get(url, stream=False, **kwargs):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for folder in FOLDERS:
            archive.add(folder, arcname=folder)
    buffer.seek(0)
    return _Response(buffer)
'''


def write_requests_from_disk(folder: Path, serves: tuple[str, ...] = ("cora",)) -> None:
    """requests.py beside the program: its download answered with a .tgz of local folders."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "requests.py").write_text(REQUESTS_FROM_DISK.format(folders=list(serves)))


NO_TENSORBOARD = """class SummaryWriter:  # tensorboard is not installed here: the scalars are dropped
    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return lambda *args, **kwargs: None
"""


def tensorboard_optional(program: Path) -> None:
    """Where ``torch.utils.tensorboard`` cannot be imported (tensorboard is not installed), the
    program's ``from torch.utils.tensorboard import SummaryWriter`` becomes a writer that drops
    what it is given; elsewhere the program is left as fetched."""
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        line = "from torch.utils.tensorboard import SummaryWriter\n"
        text = program.read_text()
        if line in text:
            program.write_text(text.replace(line, NO_TENSORBOARD, 1))


SYNTHETIC = {
    "mnist-idx": write_mnist_idx,
    "cora": write_cora,
    "requests-from-disk": write_requests_from_disk,
    "tensorboard-optional": tensorboard_optional,
}


def make_synthetic(entry: dict[str, Any], root: Path) -> list[str]:
    problems = []
    for folder, kind in entry.get("synthetic", {}).items():
        if kind not in SYNTHETIC:
            problems.append(
                f"{entry['name']}: unknown synthetic kind {kind!r} (known: {', '.join(SYNTHETIC)})"
            )
            continue
        SYNTHETIC[kind](root / entry["dir"] / folder)
    return problems


def run_prepare(entry: dict[str, Any], root: Path) -> list[str]:
    problems = []
    for argv in entry.get("prepare", []):
        done = subprocess.run(
            [sys.executable if argv[0] == "python" else argv[0], *argv[1:]],
            cwd=root / entry["dir"],
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            problems.append(
                f"{entry['name']}: {' '.join(argv)} exited {done.returncode}: {tail[0]}"
            )
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--git-dir",
        action="append",
        default=[],
        metavar="SOURCE=PATH",
        help="the git directory of one source, e.g. github:pytorch/examples=/src/examples/.git",
    )
    ap.add_argument(
        "--mirrors", action="append", type=Path, default=[], help="folder holding git directories"
    )
    ap.add_argument("--only", action="append", default=[], help="entry name (repeatable)")
    ap.add_argument(
        "--head", action="store_true", help="take HEAD where a snapshot lacks the recorded commit"
    )
    ap.add_argument(
        "--dest",
        type=Path,
        default=ROOT,
        help="the checkout to write .gallery-public/ under (default: this one)",
    )
    ap.add_argument(
        "--synthetic-only",
        action="store_true",
        help="only write the entries' synthetic datasets (no snapshot needed)",
    )
    opts = ap.parse_args()
    given: dict[str, Path] = {}
    for item in opts.git_dir:
        source, sep, path = item.partition("=")
        if not sep:
            ap.error(
                f"--git-dir {item!r}: expected SOURCE=PATH, e.g. github:pytorch/examples=/src/examples/.git"
            )
        given[source if source.startswith("github:") else f"github:{source}"] = Path(path)
    entries = json.loads(MANIFEST.read_text())["public"]
    if opts.only:
        unknown = set(opts.only) - {e["name"] for e in entries}
        if unknown:
            ap.error(f"unknown entries: {', '.join(sorted(unknown))}")
        entries = [e for e in entries if e["name"] in opts.only]
    problems: list[str] = []
    for entry in entries:
        if not entry.get("enabled", True) or not (entry.get("files") or entry.get("files_from")):
            print(f"skip {entry['name']}: disabled or no files")
            continue
        if opts.synthetic_only:
            if not entry.get("synthetic"):
                continue
            found = make_synthetic(entry, opts.dest)
        else:
            found = fetch_entry(entry, opts.dest, given, opts.mirrors, opts.head)
            found = found or make_synthetic(entry, opts.dest) + run_prepare(entry, opts.dest)
        problems += found
        print(f"{'FAIL' if found else 'ok  '} {entry['name']} -> {entry['dir']}")
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
