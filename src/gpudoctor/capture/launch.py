"""``gpudoctor run --nproc N``: start torchrun on this host with ``gpudoctor run`` as every rank's
program, and return the worst exit code of the ranks.

torchrun itself exits 1 whatever code a failed rank returned, so each rank also writes its own
code into a folder named by ``EXIT_CODES_VAR``; the launcher reads them back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from gpudoctor.core.subprocesses import default_sigint_in_child

EXIT_CODES_VAR = "GPUDOCTOR_EXIT_CODES"  # a folder: rank R writes its exit code to rank<R>


def torchrun_command(nproc: int, run_args: Sequence[str]) -> list[str]:
    """torchrun on one host (``--standalone``: a free port for the rendezvous, so two jobs on one
    machine never collide) with ``python -m gpudoctor run RUN_ARGS`` as each rank's program."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(nproc), "-m", "gpudoctor", "run", *run_args]


def launch(nproc: int, run_args: Sequence[str]) -> int:
    """Run the job to its end; the worst exit code: the highest a rank recorded, else torchrun's."""
    with tempfile.TemporaryDirectory(prefix="gpudoctor-exit-") as folder:
        env = dict(os.environ, **{EXIT_CODES_VAR: folder})
        try:
            # torchrun with default SIGINT even when gpudoctor was started with it ignored: torchrun
            # installs its own handler as it starts the ranks (which then take Ctrl-C), so this
            # makes its start-up agree
            code = subprocess.run(torchrun_command(nproc, run_args), env=env, check=False,
                                  preexec_fn=default_sigint_in_child()).returncode
        except KeyboardInterrupt:
            code = 130
        ranks = rank_exit_codes(Path(folder))
    worst = max(ranks.values(), default=0)
    return worst or (code if code >= 0 else 128 - code)  # -15: killed by SIGTERM -> 143


def rank_exit_codes(folder: Path) -> dict[int, int]:
    """The codes the ranks wrote (a file that is not one integer is skipped)."""
    codes: dict[int, int] = {}
    for path in folder.glob("rank*"):
        rank, text = path.name[4:], path.read_text().strip()
        if rank.isdecimal() and text.lstrip("-").isdecimal():
            codes[int(rank)] = int(text)
    return codes


def record_exit_code(rank: int, code: int) -> None:
    """Under ``--nproc``: leave this rank's exit code for the launcher (nothing otherwise)."""
    folder = os.environ.get(EXIT_CODES_VAR, "")
    if folder and Path(folder).is_dir():
        (Path(folder) / f"rank{rank}").write_text(f"{code}\n")
