"""`gpudoctor run` under torchrun on the CPU (gloo): every rank records the same steps into one run
directory, rank 0 writes the combined report and prints it once; `--nproc N` launches torchrun
itself and returns the worst rank's exit code; the integrations' context agrees the same way."""

from __future__ import annotations

import gzip
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from sigint import sigint_ignored

SRC = Path(__file__).parent.parent / "src"

# DDP over gloo; rank SLOW_RANK sleeps before its backward, so the others wait for it inside the
# gradients' all-reduce.
DDP = """
import os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(int(sys.argv[1])):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    if rank == int(os.environ.get("SLOW_RANK", "-1")):
        time.sleep(0.1)  # the planted host delay before the collective
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
"""

# a hand-written loop with a manual all-reduce, profiled by gpudoctor.integrations.profile
CONTEXT = """
import sys
import torch
import torch.distributed as dist
import gpudoctor.integrations as gi

dist.init_process_group("gloo")
model = torch.nn.Linear(16, 16)
with gi.profile(skip=3, steps=2, out=sys.argv[1], quiet=True, name="loop") as doc:
    for _ in range(12):
        model(torch.randn(8, 16)).sum().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        doc.step()
print("rank", dist.get_rank(), "dir", doc.run_dir)
dist.destroy_process_group()
"""


# no process group: each rank trains alone; rank 1 stops after 3 steps, before any window; rank 0
# exits with code 3 at its end
SHORT = """
import os, sys
import torch
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
steps = 3 if os.environ["RANK"] == "1" else int(sys.argv[1])
for _ in range(steps):
    model(torch.randn(8, 16)).sum().backward()
    opt.step()
    opt.zero_grad()
sys.exit(3 if os.environ["RANK"] == "0" else 0)
"""


def _run(tmp: Path, argv: list[str], program: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp / "train.py").write_text(textwrap.dedent(program))
    full = dict(os.environ, PYTHONPATH=str(SRC), OMP_NUM_THREADS="1", **env)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        full.pop(var, None)
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        env=full,
        cwd=tmp,
        timeout=240,
        check=False,
    )


def _torchrun(nproc: int) -> list[str]:
    """torchrun on this host, its rendezvous store on a port the store itself binds (``--standalone``: port 0),
    as ``gpudoctor run --nproc`` starts it: no port picked here, closed and bound again by another process
    (a free port found by binding port 0 can be taken by then, by a test running beside this one)."""
    return ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]


def _rank(run: Path, r: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A rank's env.json and its trace."""
    with gzip.open(run / f"rank{r}" / "trace.json.gz", "rt") as fh:
        return json.loads((run / f"rank{r}" / "env.json").read_text()), json.load(fh)


def _host_op_ms(run: Path, r: int, name: str) -> float:
    """ms per recorded step spent in the ranges called ``name``, from the rank's trace (a report's
    table of top ops leaves out a short one: rank 2's own all-reduce, under CI's load)."""
    env, trace = _rank(run, r)
    total_us = sum(
        e.get("dur", 0)
        for e in trace["traceEvents"]
        if e.get("name") == name and e.get("ph") == "X"
    )
    return total_us / 1e3 / env["capture"]["steps_recorded"]


@pytest.mark.e2e
def test_four_ranks_record_the_same_steps_into_one_run(tmp_path: Path) -> None:
    out = _run(
        tmp_path,
        [
            *_torchrun(4),
            "-m",
            "gpudoctor",
            "run",
            "--out",
            "runs",
            "--skip",
            "5",
            "--steps",
            "3",
            "--calibrate",
            "2",
            "--rank-timeout",
            "60",
            "train.py",
            "30",
        ],
        DDP,
        SLOW_RANK="2",
    )
    assert out.returncode == 0, out.stderr
    (run,) = (tmp_path / "runs").iterdir()  # one run directory for the whole job
    assert sorted(p.name for p in run.iterdir()) == [
        "rank0",
        "rank1",
        "rank2",
        "rank3",
        "ranks.json",
        "report.html",
        "report.json",
    ]
    for r in range(4):
        assert sorted(p.name for p in (run / f"rank{r}").iterdir()) == [
            "env.json",
            "report.html",
            "report.json",
            "trace.json.gz",
        ]
        env, trace = _rank(run, r)
        assert {
            k: env[k]
            for k in ("rank", "world_size", "local_rank", "hostname", "window", "window_agreed")
        } == {
            "rank": r,
            "world_size": 4,
            "local_rank": r,
            "hostname": socket.gethostname(),
            "window": {"first_step": 6, "steps": 3},
            "window_agreed": True,
        }
        # the steps after 5 skipped and 1 warm-up: ProfilerStep#1..#3 are the program's steps 6..8 on every rank
        assert (
            env["capture"]["window_opened_at_step"] == 5 and env["capture"]["steps_recorded"] == 3
        )
        assert trace["gpudoctor_window"] == {
            "first_step": 6,
            "steps": 3,
            "rank": r,
            "world_size": 4,
        }
        assert sorted(
            {e["name"] for e in trace["traceEvents"] if e["name"].startswith("ProfilerStep#")}
        ) == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
        assert trace["distributedInfo"]["rank"] == r and trace["distributedInfo"]["world_size"] == 4
    assert json.loads((run / "ranks.json").read_text()) == {
        "world_size": 4,
        "window": {"first_step": 6, "steps": 3},
        "ranks": [{"rank": r, "path": f"rank{r}", "state": "ok"} for r in range(4)],
    }
    # the planted 100 ms: the other ranks wait for rank 2 inside the all-reduce, rank 2 does not (4
    # processes on 2 cores: rank 2's own all-reduce still took 17 ms, the others' 39-45, with 50 ms)
    waits = {r: _host_op_ms(run, r, "gloo:all_reduce") for r in range(4)}
    assert all(waits[r] > waits[2] + 40 for r in (0, 1, 3)), waits
    combined = json.loads((run / "report.json").read_text())
    assert combined["steps"]["count"] == 3
    # the combined report names rank 2 the straggler, held up by its own host work (the sleep), and
    # prices the others' wait near the planted 100 ms (4 processes on 2 shared cores: within 25%)
    assert [r["rank"] for r in combined["ranks"]] == [0, 1, 2, 3]
    assert [r["straggler"] for r in combined["ranks"]] == [False, False, True, False]
    straggler = next(f for f in combined["findings"] if f["id"] == "straggler")
    assert straggler["evidence"]["numbers"]["rank"] == 2
    assert straggler["evidence"]["numbers"]["cause"] == "host-work"
    assert 75 <= straggler["saving_ms"] <= 125, straggler["saving_ms"]
    # rank 0 prints the report once; every other rank one line
    assert out.stdout.count("╭─") == 1
    for r in (1, 2, 3):
        assert f"gpudoctor (rank {r}): bundle in runs/{run.name}/rank{r}\n" in out.stderr
    assert f"run directory: runs/{run.name}\n" in out.stderr


@pytest.mark.e2e
def test_nproc_launches_torchrun_a_short_rank_holds_no_one_up_and_the_worst_exit_code_wins(
    tmp_path: Path,
) -> None:
    out = _run(
        tmp_path,
        [
            "-m",
            "gpudoctor",
            "run",
            "--nproc",
            "2",
            "--out",
            "runs",
            "--skip",
            "5",
            "--steps",
            "2",
            "--calibrate",
            "1",
            "--continue",
            "train.py",
            "20",
        ],
        SHORT,
    )
    assert out.returncode == 3, out.stderr  # rank 0's program exited 3 (torchrun itself says 1)
    # rank 1 recorded nothing and says so, without failing the job (torchrun would stop rank 0)
    assert (
        "gpudoctor (rank 1): no bundle; the program ran 3 steps (optimizer-step) and ended with exit code 0 "
        "before the window"
    ) in out.stderr
    (run,) = (tmp_path / "runs").iterdir()
    assert sorted(p.name for p in run.iterdir()) == [
        "rank0",
        "ranks.json",
        "report.html",
        "report.json",
    ]
    assert json.loads((run / "ranks.json").read_text())["ranks"] == [
        {"rank": 0, "path": "rank0", "state": "ok"},
        {"rank": 1, "path": "rank1", "state": "left"},
    ]
    note = "rank 1 ended after 3 steps, before the window (--skip): it has no bundle"
    assert note in json.loads((run / "rank0" / "env.json").read_text())["capture"]["notes"]
    assert note in json.loads((run / "report.json").read_text())["warnings"]
    assert out.stdout.count("╭─") == 1


@pytest.mark.e2e
def test_nproc_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    for args, message in (
        (["--nproc", "0"], "--nproc must be 1 or more processes, got 0"),
        (["--nproc", "2", "--try-fixes"], "--try-fixes reruns one process per knob"),
        (["--nproc", "2", "--rank-timeout", "0"], "--rank-timeout must be a positive number"),
    ):
        out = _run(tmp_path, ["-m", "gpudoctor", "run", *args, "train.py", "3"], DDP)
        assert out.returncode == 2 and out.stderr.startswith(f"error: {message}"), out.stderr
        assert "Traceback" not in out.stderr


@pytest.mark.e2e
def test_the_integrations_context_agrees_under_torchrun(tmp_path: Path) -> None:
    out = _run(tmp_path, [*_torchrun(2), "train.py", str(tmp_path / "runs")], CONTEXT)
    assert out.returncode == 0, out.stderr
    (run,) = (tmp_path / "runs").iterdir()
    assert run.name.startswith("loop-") and not re.search(r"-rank\d", run.name)
    for r in range(2):
        env, trace = _rank(run, r)
        assert env["window"] == {"first_step": 4, "steps": 2} and env["window_agreed"] is True
        assert trace["gpudoctor_window"]["first_step"] == 4
    assert (run / "report.json").is_file() and (run / "ranks.json").is_file()
    # rank 0 ends holding RUN (the combined report), rank 1 its own bundle
    assert f"rank 0 dir {run}\n" in out.stdout and f"rank 1 dir {run / 'rank1'}\n" in out.stdout


def test_nproc_gives_torchrun_ctrl_c_when_started_with_sigint_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """gpudoctor started as a background job (SIGINT ignored, which its children would inherit): the
    job it launches still takes SIGINT, as torchrun does once its ranks run (it installs its own handler).
    The child here sends itself SIGINT; taken, it ends as an uncaught KeyboardInterrupt does (130)."""
    from gpudoctor.capture import launch as launch_mod

    child = "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(120)\nraise SystemExit(5)\n"
    monkeypatch.setattr(
        launch_mod, "torchrun_command", lambda nproc, run_args: [sys.executable, "-c", child]
    )
    with sigint_ignored():
        assert launch_mod.launch(2, []) == 130
