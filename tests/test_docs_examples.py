"""Every example in README.md and docs/*.md, run as the doc shows it.

Fenced ``console`` blocks hold ``$ gpudoctor ...`` lines, each followed by what it prints; ``bash``
blocks hold commands alone; ``python`` blocks are scripts. HTML comments on the lines right above a
fence say how the block is checked:

- ``<!-- needs: gpu -->`` / ``<!-- needs: program -->`` (a CUDA GPU, or the reader's own program or
  files): not run; each gpudoctor command must parse (its subcommand accepts every option used,
  click's own parser, nothing invoked); a python block must compile.
- ``<!-- usage -->``: a synopsis with placeholders; each ``--option`` must be one its subcommand has.
- ``<!-- output: excerpt -->``: the output shown is a subset of what the command prints (stdout and
  stderr): its lines, in order, not necessarily adjacent. Without it, the output shown is exactly
  the command's stdout (trailing spaces and blank lines aside).
- ``<!-- exit: N -->``: the commands exit with code N (default 0).
- ``<!-- slow -->``: marked ``e2e`` (the full suite only).

The rest runs on a CPU against the repository's own data (tests/data, the embedded demo trace, the
presets), in a temporary folder that links ``tests``, ``src`` and ``benchmarks`` back to the
checkout. ``pip install`` and ``python -m pytest`` steps are not run; the README's test command is
checked to be the one .ci/run runs.

``python tests/test_docs_examples.py --write`` rewrites the output shown in every exact console
block from what the commands print now.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGS = {"console", "bash", "sh", "shell"}
LINKED = ("tests", "src", "benchmarks")
WIDTH = "80"  # rich lays reports out at COLUMNS when stdout is not a terminal

FENCE = re.compile(r"^(```+)\s*([\w-]*)\s*$")
COMMENT = re.compile(r"^<!--\s*(.*?)\s*-->$")


@dataclass
class Block:
    doc: Path
    line: int  # 1-based line of the opening fence
    lang: str
    body: list[str]
    marks: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return "needs" not in self.marks and "usage" not in self.marks


def _marks(lines: list[str], fence: int) -> dict[str, str]:
    """The HTML comments on the lines right above line index ``fence``: ``key: value`` or ``key``."""
    marks: dict[str, str] = {}
    i = fence - 1
    while i >= 0 and (m := COMMENT.match(lines[i].strip())):
        key, _, value = m.group(1).partition(":")
        marks[key.strip()] = value.strip()
        i -= 1
    return marks


def blocks(doc: Path) -> list[Block]:
    lines = doc.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == m.group(1))
        found.append(Block(doc, i + 1, m.group(2).lower(), lines[i + 1 : end], _marks(lines, i)))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [b for doc in DOCS for b in blocks(doc)]


def examples() -> list[Block]:
    return [b for b in all_blocks() if b.lang in SHELL_LANGS or b.lang == "python"]


@dataclass
class Command:
    text: str
    output: list[str]  # what the doc shows it prints (console blocks)


def commands(block: Block) -> list[Command]:
    """Console blocks: ``$ `` lines and the output under each. Other shell blocks: every line not a
    comment; a trailing backslash joins the next line."""
    cmds: list[Command] = []
    pending = ""
    for raw in block.body:
        if block.lang == "console" and not raw.startswith("$ ") and not pending:
            if cmds:
                cmds[-1].output.append(raw.rstrip())
            continue
        text = raw[2:] if block.lang == "console" and not pending else raw
        if not pending and (not text.strip() or text.lstrip().startswith("#")):
            continue
        if text.rstrip().endswith("\\"):
            pending += text.rstrip()[:-1] + " "
            continue
        cmds.append(Command(pending + text.strip(), []))
        pending = ""
    for c in cmds:
        while c.output and not c.output[-1]:
            c.output.pop()
    return cmds


def segments(text: str) -> list[list[str]]:
    """The simple commands of a command line (split at &&, ||, ;, |), as argv lists, without
    redirections and comments."""
    out: list[list[str]] = [[]]
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    tokens = list(lexer)
    skip_next = False
    for tok in tokens:
        if skip_next:
            skip_next = False
        elif tok in {"&&", "||", ";", "|"}:
            out.append([])
        elif tok in {">", ">>", "<", "2>", "&>"}:
            skip_next = True
        else:
            out[-1].append(tok)
    return [s for s in out if s]


def gpudoctor_args(argv: list[str]) -> list[str] | None:
    """The arguments of a gpudoctor invocation (``gpudoctor ...``, ``python -m gpudoctor ...``,
    ``torchrun ... -m gpudoctor ...``), else None."""
    if argv[0] == "gpudoctor":
        return argv[1:]
    for i in range(len(argv) - 1):
        if (
            argv[i] == "-m"
            and argv[i + 1] == "gpudoctor"
            and argv[0] in {"python", "python3", "torchrun"}
        ):
            return argv[i + 2 :]
    return None


def not_run(argv: list[str]) -> bool:
    """Steps a test does not run: installing packages, and the test suite itself."""
    return argv[:2] == ["pip", "install"] or argv[:3] == ["python", "-m", "pytest"]


def _command(args: list[str]) -> tuple[Any, Any, str, list[str]]:
    """The (sub)command that the leading words of ``args`` name: (command, its parent context, its
    name, the arguments left). Typer may carry its own copy of click, so groups are told by
    ``list_commands``, not by class."""
    import typer.main

    from gpudoctor.cli import app

    cmd = typer.main.get_command(app)
    ctx, name = None, "gpudoctor"
    args = [a for a in args if a != "--debug"]
    while hasattr(cmd, "list_commands"):
        parent = cmd.context_class(cmd, info_name=name, parent=ctx)
        sub = cmd.get_command(parent, args[0]) if args else None
        if sub is None:
            raise AssertionError(
                f"{name}: no subcommand {args[:1]}; known: {cmd.list_commands(parent)}"
            )
        ctx, name, cmd, args = parent, args[0], sub, args[1:]
    return cmd, ctx, name, args


def click_parse(args: list[str]) -> None:
    """Parse a gpudoctor command line with the CLI's own parser (its usage error when it does not
    parse). Nothing is invoked."""
    cmd, parent, name, rest = _command(args)
    with cmd.make_context(name, rest, parent=parent):
        pass


def help_options(args: list[str]) -> set[str]:
    """Every option name of the subcommand named by the leading words of ``args``."""
    words = []
    for w in args:
        if w.startswith("-") or not re.fullmatch(r"[a-z]+", w):
            break
        words.append(w)
    cmd = _command(words)[0]
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}


def environment(tmp_path: Path) -> dict[str, str]:
    """A folder as the repository's root looks to a reader (tests/, src/, benchmarks/ linked back)
    and a ``gpudoctor`` on the PATH that runs this checkout's source."""
    for name in LINKED:
        link = tmp_path / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "gpudoctor"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gpudoctor "$@"\n')
    shim.chmod(0o755)
    # CUDA hidden: every example runs as the docs show it, on a CPU (the demo diagnoses its sample trace)
    return dict(
        os.environ,
        PYTHONPATH=str(ROOT / "src"),
        COLUMNS=WIDTH,
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        TERM="dumb",
        NO_COLOR="1",
        CUDA_VISIBLE_DEVICES="",
    )


def runnable_line(text: str) -> str | None:
    """The command line to run: its pip and pytest steps dropped (None when nothing is left)."""
    kept = [shlex.join(s) for s in segments(text) if not not_run(s)]
    if not kept:
        return None
    if len(kept) == len(segments(text)):
        return text
    return " && ".join(kept)


def run_line(text: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", text],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def shown_in_order(shown: list[str], printed: list[str]) -> list[str]:
    """The shown lines not found, in order, among the printed ones (empty: all found)."""
    it = iter(printed)
    return [line for line in shown if not any(line == p for p in it)]


def clean(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _param(b: Block) -> pytest.param:
    marks = [pytest.mark.e2e] if "slow" in b.marks else []
    return pytest.param(b, id=b.name, marks=marks)


EXAMPLES = examples()


def test_the_docs_hold_examples() -> None:
    """The extraction itself: a doc edit that breaks the fences would otherwise pass every check."""
    assert len([b for b in EXAMPLES if b.doc.name == "README.md"]) >= 5
    assert len({b.doc for b in EXAMPLES}) >= 8


def test_no_command_hides_in_an_unchecked_block() -> None:
    """A ``$ gpudoctor`` line in a text or untagged block would escape every check."""
    hidden = [
        f"{b.name}: {line}"
        for b in all_blocks()
        if b.lang not in SHELL_LANGS | {"python"}
        for line in b.body
        if re.match(r"\$ (gpudoctor|python|torchrun)\b", line)
    ]
    assert hidden == []


def test_marks_are_known() -> None:
    known = {"needs", "usage", "output", "exit", "slow"}
    bad = [f"{b.name}: {k}" for b in EXAMPLES for k in b.marks if k not in known]
    assert bad == []
    assert [b.name for b in EXAMPLES if b.marks.get("needs", "gpu") not in {"gpu", "program"}] == []
    assert [b.name for b in EXAMPLES if b.marks.get("output", "excerpt") != "excerpt"] == []


def test_readme_test_command_is_the_one_ci_runs() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    ci_command = ci[ci.index("# The README's test command, exactly:") + 1]
    readme_lines = [
        c.text for b in blocks(ROOT / "README.md") if b.lang in SHELL_LANGS for c in commands(b)
    ]
    assert ci_command in readme_lines
    assert any(
        line.endswith("&& gpudoctor demo") and "pip install" in line for line in readme_lines
    )


@pytest.mark.parametrize(
    "block", [_param(b) for b in EXAMPLES if b.lang in SHELL_LANGS and b.runnable]
)
def test_shell_example_runs_as_shown(block: Block, tmp_path: Path) -> None:
    env = environment(tmp_path)
    expected_rc = int(block.marks.get("exit", "0"))
    cmds = commands(block)
    assert cmds, f"{block.name}: no command in the block"
    for cmd in cmds:
        line = runnable_line(cmd.text)
        if line is None:
            continue
        out = run_line(line, tmp_path, env)
        assert out.returncode == expected_rc, (
            f"{block.name}: `{cmd.text}` exited {out.returncode}\n{out.stderr[-2000:]}"
        )
        if block.lang != "console":
            continue
        if block.marks.get("output") == "excerpt":
            missing = shown_in_order(cmd.output, clean(out.stdout + out.stderr))
            assert missing == [], (
                f"{block.name}: `{cmd.text}` no longer prints these lines (in this order)"
            )
        else:
            assert clean(out.stdout) == cmd.output, (
                f"{block.name}: `{cmd.text}` prints otherwise now"
            )


@pytest.mark.parametrize(
    "block", [_param(b) for b in EXAMPLES if b.lang in SHELL_LANGS and "needs" in b.marks]
)
def test_command_that_needs_a_gpu_or_a_program_parses(block: Block) -> None:
    parsed = 0
    for cmd in commands(block):
        for argv in segments(cmd.text):
            args = gpudoctor_args(argv)
            if args is not None:
                click_parse(args)
                parsed += 1
    assert parsed, f"{block.name}: no gpudoctor command in the block"


@pytest.mark.parametrize("block", [_param(b) for b in EXAMPLES if "usage" in b.marks])
def test_usage_names_only_real_options(block: Block) -> None:
    for cmd in commands(block):
        words = cmd.text.split()
        args = gpudoctor_args(words)
        assert args is not None, f"{block.name}: {cmd.text}"
        known = help_options(args)
        used = {m.split("=")[0] for m in re.findall(r"(?<![\w-])--?[a-zA-Z][\w-]*", cmd.text)}
        assert used - known == set(), f"{block.name}: `{cmd.text}`"


@pytest.mark.parametrize("block", [_param(b) for b in EXAMPLES if b.lang == "python"])
def test_python_example(block: Block, tmp_path: Path) -> None:
    source = "\n".join(block.body) + "\n"
    compile(source, block.name, "exec")
    if not block.runnable:
        return
    env = environment(tmp_path)
    script = tmp_path / "example.py"
    script.write_text(source)
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == int(block.marks.get("exit", "0")), (
        f"{block.name}:\n{out.stderr[-2000:]}"
    )


def test_findings_doc_has_a_row_per_rule() -> None:
    """docs/findings.md is where a new rule gets its row (ARCHITECTURE.md): one per id, no other."""
    from gpudoctor.ranks.combine import RULE_TITLES
    from gpudoctor.rules.registry import RULES

    rows = re.findall(
        r"^\| `([a-z0-9-]+)` \| .* \| .* \|$",
        (ROOT / "docs" / "findings.md").read_text(),
        re.MULTILINE,
    )
    assert sorted(rows) == sorted(
        [*RULES, *RULE_TITLES]
    )  # the idle causes' table has two columns, not three


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_inline_commands_name_real_options() -> None:
    """A command quoted in the prose (`gpudoctor run --json train.py`) names only options its
    subcommand has: a renamed option fails here as in the fenced examples."""
    wrong = []
    for doc in DOCS:
        prose = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)
        for span in re.findall(r"`(gpudoctor [^`\n]+)`", prose):
            words = span.split()
            used = {w.split("=")[0] for w in words if re.fullmatch(r"--?[a-zA-Z][\w-]*(=.*)?", w)}
            if not used:
                continue  # a command's name alone
            unknown = used - help_options(words[1:])
            if unknown:
                wrong.append(f"{doc.name}: `{span}`: {sorted(unknown)}")
    assert wrong == []


def test_links_between_the_docs_resolve() -> None:
    """Every relative link of README.md and docs/*.md names a file that exists and, into a .md
    file, a heading it has."""
    broken = []
    for doc in DOCS:
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                broken.append(f"{doc.name}: {target}")
            elif anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", file.read_text(), re.MULTILINE)
                if anchor not in {_slug(h) for h in headings}:
                    broken.append(f"{doc.name}: {target}")
    assert broken == []


def test_try_fixes_doc_states_the_trial_length_a_run_uses() -> None:
    """docs/try-fixes.md gives how long a trial runs in numbers; they are the ones the code runs
    with (capture/timing.py, tryfix/trial.py, tryfix/knobs.py)."""
    from gpudoctor.capture import timing as t
    from gpudoctor.tryfix.knobs import WARMUP_COMPILE
    from gpudoctor.tryfix.trial import DEFAULT_TIMEOUT_S, TRIAL_MIN_SKIP

    text = " ".join((ROOT / "docs" / "try-fixes.md").read_text().split())
    stated = [
        f"runs `--skip` steps, and at least {TRIAL_MIN_SKIP}, plus {WARMUP_COMPILE} more for a compile knob",
        # with or without the window (capture/session.py CaptureConfig.trial), the settled timing
        (
            f"the median of its last {t.TRIAL_SETTLE_HALF} steps within {t.TRIAL_SETTLE_RATIO:g}x of the "
            f"{t.TRIAL_SETTLE_HALF} before them (and of its fastest {t.TRIAL_SETTLE_HALF} so far)"
        ),
        f"It waits at most {t.TRIAL_SETTLE_MAX_STEPS} steps or {t.TRIAL_SETTLE_MAX_S:g} seconds past `--skip`",
        (
            f"Once settled, it times the steps after those {2 * t.TRIAL_SETTLE_HALF}: at least {t.TRIAL_TIMED_STEPS} steps over at "
            f"least {t.TRIAL_TIMED_MIN_S:g} seconds, and more while the standard error of their mean is over "
            f"{t.TRIAL_TIMED_SE:.0%} of it; it stops at {t.TRIAL_TIMED_MAX_STEPS} steps or {t.TRIAL_TIMED_MAX_S:g} "
            f"seconds once it has {t.TRIAL_JUDGED_MIN_STEPS} steps over {t.TRIAL_JUDGED_MIN_S:g} second"
        ),
        f"`--trial-timeout` ({DEFAULT_TIMEOUT_S:g} seconds by default)",
        f"A verdict needs at least {t.TRIAL_JUDGED_MIN_STEPS} steps over {t.TRIAL_JUDGED_MIN_S:g} second on each side",
    ]
    assert [s for s in stated if s not in text] == []


def _write_outputs(tmp_path: Path) -> None:
    """Rewrite the output under every exact console command from what it prints now."""
    env = environment(tmp_path)
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        for block in reversed(blocks(doc)):
            if (
                block.lang != "console"
                or not block.runnable
                or block.marks.get("output") == "excerpt"
            ):
                continue
            body: list[str] = []
            for cmd in commands(block):
                line = runnable_line(cmd.text)
                printed = clean(run_line(line, tmp_path, env).stdout) if line else []
                body += ["$ " + cmd.text, *printed]
            lines[block.line : block.line + len(block.body)] = body
        doc.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_docs_examples.py --write")
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        _write_outputs(Path(d))
