"""Files gpudoctor writes for the user (--html, --out): never over an input, never half-written.

``gpudoctor analyze v.json --html v.json`` must not replace the trace with its own report.
Every output path is checked against the command's inputs (the same file by inode, or by resolved
path) and refused when it names one, or a folder; the file is then written to a temporary file in
the same folder and moved over the target in one step (``os.replace``), so a failure leaves the
old file untouched. The new file gets the mode any program would give it (0666 less the umask), or
keeps the mode of the file it replaces.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from gpudoctor.errors import InputError


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file: the same inode (hard and symbolic links), or the same path
    once resolved (for a file that does not exist yet)."""
    with contextlib.suppress(OSError):
        if os.path.samefile(a, b):
            return True
    return os.path.realpath(a) == os.path.realpath(b)


def check_output_file(target: Path, option: str,
                      inputs: Iterable[str | os.PathLike[str] | None] = (),
                      example: str = "report.html") -> None:
    """Raise an InputError when ``target`` cannot take the output: a folder, a path in a missing
    folder, or one of ``inputs``."""
    try:
        _check_output_file(target, option, inputs, example)
    except OSError as exc:  # a folder on the way that cannot be entered
        raise InputError(
            f"{option} {target}: {exc.strerror or exc}; choose a path you can write to") from None


def _check_output_file(target: Path, option: str, inputs: Iterable[str | os.PathLike[str] | None],
                       example: str) -> None:
    if target.is_dir():
        raise InputError(
            f"{option} {target} is a directory; give a file path such as {target / example}")
    for source in inputs:
        if source is not None and same_file(target, source):
            raise InputError(
                f"{option} {target} is an input of this command ({source}): writing there would "
                f"destroy it; give another file path such as {example}"
            )
    folder = target.parent
    if not folder.exists():
        raise InputError(
            f"{option} {target}: folder {folder} does not exist; create it or choose another path")
    if not folder.is_dir():
        raise InputError(f"{option} {target}: {folder} is not a folder; choose another path")
    if target.exists() and not target.is_file():
        raise InputError(f"{option} {target} is not a regular file (a device, FIFO or socket); "
                         f"give a file path such as {example}")


def check_output_dir(target: Path, option: str) -> None:
    """Raise an InputError when ``target`` is not a folder that can be written in, nor one that can
    be created: checked before the program starts, since the first write comes only when its
    window closes, inside the program's own step."""
    if target.exists() and not target.is_dir():
        raise InputError(f"{option} {target} is a file, not a folder: run directories are written "
                         "inside it; give a folder path (it is created when missing)")
    folder = target
    while not folder.exists() and folder != folder.parent:  # the nearest folder that exists
        folder = folder.parent
    if not folder.is_dir():
        raise InputError(f"{option} {target}: {folder} is a file, not a folder, so {target} cannot "
                         "be created; give a folder path you can write to")
    try:  # a real write: permissions, read-only mounts and /proc-like file systems all answer here
        os.rmdir(tempfile.mkdtemp(prefix=".gpudoctor-check-", dir=folder))
    except OSError as exc:
        what = "written in" if folder == target else f"created (inside {folder})"
        raise InputError(f"{option} {target} cannot be {what}: {exc.strerror or exc}; "
                         "give a folder path you can write to") from None


def write_text_atomic(target: Path, text: str, option: str = "output",
                      inputs: Iterable[str | os.PathLike[str] | None] = ()) -> None:
    """Write ``text`` to ``target`` in one step, after ``check_output_file``."""
    write_bytes_atomic(target, text.encode("utf-8"), option, inputs)


def write_bytes_atomic(target: Path, data: bytes, option: str = "output",
                       inputs: Iterable[str | os.PathLike[str] | None] = ()) -> None:
    """Write ``data`` to ``target`` in one step, after ``check_output_file``."""
    with atomic_file(target, option, inputs) as handle:
        handle.write(data)


@contextlib.contextmanager
def atomic_file(target: Path, option: str = "output",
                inputs: Iterable[str | os.PathLike[str] | None] = ()) -> Iterator[BinaryIO]:
    """A binary file, written in the block, that replaces ``target`` in one step when the block
    ends (after ``check_output_file``); when the block raises, nothing of it is left."""
    check_output_file(target, option, inputs)
    folder = target.parent
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(
            f"cannot write {option} {target}: {exc.strerror}; choose a folder you can write to") from None
    try:
        os.fchmod(fd, _mode_for(target))  # mkstemp makes 0600 files
        with os.fdopen(fd, "wb") as handle:
            yield handle
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise InputError(f"cannot write {option} {target}: {exc.strerror or exc}; the old "
                             "file, if any, is untouched") from None
        raise


@contextlib.contextmanager
def staged_files(targets: Sequence[Path], option: str = "output",
                 inputs: Iterable[str | os.PathLike[str] | None] = ()) -> Iterator[list[Path]]:
    """Files that stand for ``targets`` (each checked by ``check_output_file``) while the block
    writes them, in the targets' folders under hidden names: when the block ends each one written
    replaces its target in one step, after all of them are written; when it raises, none of them
    is left and every target is as it was. For outputs that belong together (a job's ranks'
    annotated traces and their merge), so that a failure halfway leaves no part of them."""
    inputs = list(inputs)
    for target in targets:
        check_output_file(target, option, inputs)
    token = secrets.token_hex(6)
    staged = [target.with_name(f".{target.name}.{token}.tmp") for target in targets]
    try:
        yield staged
    except BaseException:
        _remove(staged)
        raise
    for part, target in zip(staged, targets):
        if not part.exists():  # a part the block chose not to write leaves its target as it was
            continue
        try:
            os.chmod(part, _mode_for(target))
            os.replace(part, target)
        except OSError as exc:
            _remove(staged)
            raise InputError(f"cannot write {option} {target}: {exc.strerror or exc}; choose a "
                             "folder you can write to") from None


def _remove(paths: Iterable[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


def _mode_for(target: Path) -> int:
    """The mode of the file being replaced, else 0666 less the process's umask."""
    with contextlib.suppress(OSError):
        st = target.stat()
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode)
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
