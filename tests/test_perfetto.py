"""The annotated trace (report/perfetto.py): the original trace's events byte for byte, plus the
diagnosis on tracks of its own; valid trace-event JSON; diagnosed as the original; CLI and bundle."""

from __future__ import annotations

import decimal
import gzip
import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import msgspec
import numpy as np
import pytest
from browser import load_page
from synth import TraceBuilder
from test_cli import DATA, gd

from gpudoctor.analysis.host_events import SYNC_OPS, SYNC_RUNTIME
from gpudoctor.analysis.idle_spans import idle_spans
from gpudoctor.errors import TraceFormatError
from gpudoctor.pipeline import analyze_inputs, analyze_path, diagnose_path, rank_file
from gpudoctor.report.html import render_html
from gpudoctor.report.perfetto import CAT, free_ids
from gpudoctor.trace import load

HOST_SYNC = DATA / "host_sync" / "trace.json.gz"
INFERENCE = DATA / "gallery_h100" / "inference_loop"  # a run directory: trace.json.gz and env.json
DDP = DATA / "ddp2_h100" / "slow"  # rank0/ and rank1/ bundles


def _strict(data: bytes) -> dict:
    """JSON as browsers parse it: NaN and Infinity refused."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(data, parse_constant=refuse)


def _events(path: Path) -> list[dict]:
    raw = path.read_bytes()
    return _strict(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)["traceEvents"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _annotate(source: Path, target: Path):  # type: ignore[no-untyped-def]
    return analyze_inputs([source], annotate=target)


@pytest.fixture(scope="module")
def host_sync(tmp_path_factory):  # type: ignore[no-untyped-def]
    target = tmp_path_factory.mktemp("annotated") / "host_sync.trace.json.gz"
    before = _digest(HOST_SYNC)
    report = _annotate(HOST_SYNC, target)
    assert _digest(HOST_SYNC) == before  # the input is never touched
    original = _events(HOST_SYNC)
    annotated = _events(target)
    return report, original, annotated, annotated[len(original) :], target


def test_the_original_events_come_first_unchanged(host_sync) -> None:  # type: ignore[no-untyped-def]
    _, original, annotated, added, _ = host_sync
    assert annotated[: len(original)] == original
    assert len(added) == 1189
    assert {e["cat"] for e in added} == {CAT}
    assert Counter(e["ph"] for e in added) == {"X": 1027, "s": 75, "f": 75, "M": 2 + 2 * 5}


def test_added_tracks_are_declared_and_their_own(host_sync) -> None:  # type: ignore[no-untyped-def]
    _, original, _, added, _ = host_sync
    used = {v for e in original for v in (e.get("pid"), e.get("tid")) if isinstance(v, int)}
    processes = {e["pid"]: e["args"]["name"] for e in added if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in added if e["name"] == "thread_name"}
    assert list(processes.values()) == ["gpudoctor"]
    assert list(threads.values()) == [
        "gpudoctor: steps",
        "gpudoctor: GPU idle",
        "gpudoctor: 1. host-sync",
        "gpudoctor: 2. launch-bound",
        "gpudoctor: 3. unfused-elementwise",
    ]
    assert (
        not (set(processes) | {t for _, t in threads}) & used
    )  # Perfetto names a thread by its tid alone
    host_threads = {(e["pid"], e["tid"]) for e in original if e.get("cat") == "cpu_op"}
    for e in added:
        if e["ph"] in ("X", "f"):
            assert (e["pid"], e["tid"]) in threads, e
        elif e["ph"] == "s":  # an arrow leaves from the trace's own host thread
            assert (e["pid"], e["tid"]) in host_threads, e


def test_added_events_lie_inside_the_trace_on_its_own_clock(host_sync) -> None:  # type: ignore[no-untyped-def]
    _, _, _, added, target = host_sync
    trace = load(HOST_SYNC)
    lo, hi = trace.origin_ns, trace.origin_ns + trace.span[1]
    for e in added:
        assert lo <= round(e["ts"] * 1000) <= hi, e
        assert round((e["ts"] + e.get("dur", 0)) * 1000) <= hi + 1, e
    # the steps and the idle spans start where events of the trace start or end, in its own microseconds:
    # read as decimals, to the nanosecond the loader reads them (it rounds us * 1000 in floating point)
    original = json.loads(gzip.decompress(HOST_SYNC.read_bytes()), parse_float=decimal.Decimal)[
        "traceEvents"
    ]
    mine = json.loads(gzip.decompress(target.read_bytes()), parse_float=decimal.Decimal)[
        "traceEvents"
    ][len(original) :]
    timed = [e for e in original if e.get("ph") == "X"]
    edges = np.unique(
        [int(e["ts"] * 1000) for e in timed] + [int((e["ts"] + e["dur"]) * 1000) for e in timed]
    )
    own = [
        e
        for e in mine
        if e["ph"] == "X"
        and (e["name"].startswith("step ") or e["args"].get("cause") in ("dispatch", "host-sync"))
    ]
    assert len(own) == 3 + 520 + 334
    starts = np.array([int(e["ts"] * 1000) for e in own])
    assert all(
        (e["ts"] * 1000) % 1 == 0 for e in own
    )  # whole nanoseconds, written as the trace writes them
    at = np.clip(np.searchsorted(edges, starts), 1, len(edges) - 1)
    nearest = np.minimum(np.abs(edges[at] - starts), np.abs(edges[at - 1] - starts))
    assert nearest.max() <= 2


def test_steps_idle_and_findings_say_what_the_report_says(host_sync) -> None:  # type: ignore[no-untyped-def]
    report, _, _, added, _ = host_sync
    slices = [e for e in added if e["ph"] == "X"]
    steps = [e["args"] for e in slices if e["name"].startswith("step ")]
    assert (
        [s["profiled_ms"] for s in steps]
        == list(report.steps.per_step_ms)
        == [10.733, 10.4714, 10.2018]
    )
    assert [s["label"] for s in steps] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert all(
        "unprofiled_step_ms" not in s for s in steps
    )  # a bare trace: not timed without the profiler
    idle = Counter()
    for e in slices:
        if "cause" in e["args"]:
            idle[e["name"]] += e["dur"] / 1000 / 3
    assert {k: v for k, v in report.idle.items() if v} == {
        "dispatch": 5.0658,
        "host-sync": 1.7915,
        "optimizer": 0.7103,
        "gpu-wait": 0.065,
    }
    assert idle == {
        k: pytest.approx(v, abs=5e-5) for k, v in report.idle.items() if v
    }  # no catch-up moved here
    for f in report.findings:
        mine = [e["args"] for e in slices if e["args"].get("finding") == f.id]
        assert len(mine) == 3  # one per step
        assert {a["saving_ms"] for a in mine} == {round(f.saving_ms, 4)}
        assert {a["predicted_speedup"] for a in mine} == {round(f.predicted_speedup, 4)}
        assert all(
            a["evidence"] == f.evidence.numbers and a["first_fix"] == f.fixes[0].title for a in mine
        )
    placed = {k: v.placed_by for k, v in report.annotated_trace.findings.items()}
    assert placed == {
        "host-sync": "its idle (host-sync)",
        "launch-bound": "its idle (dispatch)",
        "unfused-elementwise": "its kernels",
    }


def test_each_sync_points_at_the_idle_it_leaves(host_sync) -> None:  # type: ignore[no-untyped-def]
    _, original, _, added, _ = host_sync
    starts = {e["id"]: e for e in added if e["ph"] == "s"}
    ends = {e["id"]: e for e in added if e["ph"] == "f"}
    assert sorted(starts) == sorted(ends) == list(range(1, 76))  # 25 syncs a step
    assert {e["name"] for e in starts.values()} == {"host-sync"} and all(
        e["bp"] == "e" for e in ends.values()
    )
    syncs = SYNC_RUNTIME | SYNC_OPS
    innermost = []
    for (
        s
    ) in starts.values():  # the innermost host event around the arrow's start: the call that waits
        around = [
            e
            for e in original
            if e.get("ph") == "X"
            and (e["pid"], e["tid"]) == (s["pid"], s["tid"])
            and e["ts"] <= s["ts"] < e["ts"] + e["dur"]
        ]
        innermost.append(min(around, key=lambda e: e["dur"])["name"])
    assert Counter(innermost) == {"cudaStreamSynchronize": 75}
    assert set(innermost) <= syncs
    idle = [e for e in added if e["ph"] == "X" and e["name"] == "host-sync"]
    for f in ends.values():
        assert any(e["ts"] <= f["ts"] <= e["ts"] + e["dur"] for e in idle), f


def test_the_annotated_trace_diagnoses_as_the_original(host_sync) -> None:  # type: ignore[no-untyped-def]
    report, _, _, _, target = host_sync
    again = analyze_path(target)
    assert [(f.id, f.saving_ms) for f in again.findings] == [
        (f.id, f.saving_ms) for f in report.findings
    ]
    assert again.idle == report.idle and again.steps == report.steps


def test_a_run_directory_annotated_is_a_bundle_that_diagnoses_the_same(tmp_path: Path) -> None:
    report = _annotate(INFERENCE, tmp_path / "annotated.trace.json.gz")
    assert report.unprofiled_step_ms == 5.6703  # env.json read
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (tmp_path / "annotated.trace.json.gz").rename(bundle / "trace.json.gz")
    shutil.copy(INFERENCE / "env.json", bundle / "env.json")
    again = analyze_path(bundle)
    assert [(f.id, f.saving_ms) for f in again.findings] == [
        (f.id, f.saving_ms) for f in report.findings
    ]
    assert [f.id for f in report.findings] == [
        "launch-bound",
        "host-sync",
        "pageable-copy",
        "unfused-elementwise",
        "small-gemm",
    ]
    steps = [e["args"] for e in _events(bundle / "trace.json.gz") if e["name"].startswith("step ")]
    assert {s["unprofiled_step_ms"] for s in steps} == {5.6703} and len(steps) == 5


def test_annotating_an_annotated_trace_replaces_the_annotation(host_sync, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    report, original, _, added, first = host_sync
    second = tmp_path / "again.json"  # not .gz: plain JSON
    again = _annotate(first, second)
    assert second.read_bytes()[:1] == b"{"
    events = _events(second)
    assert events[: len(original)] == original
    assert events[len(original) :] == added  # the same tracks once, not twice
    assert [(f.id, f.saving_ms) for f in again.findings] == [
        (f.id, f.saving_ms) for f in report.findings
    ]


def test_idle_spans_place_what_idle_causes_sums() -> None:
    found = diagnose_path(INFERENCE)
    a = found.analysis
    spans = idle_spans(a.trace, a.steps, a.idle)
    by_cause = spans.ms_by_cause(len(a.steps))
    assert np.all(spans.end[:-1] <= spans.start[1:]) and np.all(spans.end > spans.start)
    for cause, ms in a.idle.by_cause_ms.items():
        if cause not in (
            "dispatch",
            "host-sync",
            "pageable-copy",
        ):  # the catch-up moves between these three
            assert by_cause[cause] == pytest.approx(ms, abs=1e-9), cause
    three = ("dispatch", "host-sync", "pageable-copy")
    assert sum(by_cause[c] for c in three) == pytest.approx(
        sum(a.idle.by_cause_ms[c] for c in three), abs=1e-9
    )
    assert sum(by_cause.values()) == pytest.approx(a.idle.idle_ms, abs=1e-9)


@pytest.mark.parametrize("form", ["object", "array"])
def test_a_trace_laid_out_otherwise_without_launch_links(tmp_path: Path, form: str) -> None:
    """Compact JSON (no Kineto layout), the Chrome "JSON Array" form, string pids, kernels tied to
    no launch: the idle is drawn whole as "unattributed", the file stays of its form."""
    t = TraceBuilder()
    for n, start in enumerate((0.0, 100.0, 200.0), 1):
        t.step(n, start, 100.0)
        for k in range(3):
            t.kernel(f"k{k}", start + 10 + 25 * k, 15.0, correlation=100 * n + k)
    t.events.append(
        {
            "ph": "X",
            "cat": "Trace",
            "name": "PyTorch Profiler (0)",
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": -5.0,
            "dur": 320.0,
        }
    )
    source = tmp_path / "trace.json"
    source.write_text(json.dumps(t.to_dict() if form == "object" else t.events))
    report = analyze_inputs(
        [source], annotate=tmp_path / "annotated.json", gpu="h100-sxm"
    )  # arrays name no GPU
    text = (tmp_path / "annotated.json").read_text()
    events = _strict(text.encode())["traceEvents"] if form == "object" else json.loads(text)
    assert events[: len(t.events)] == t.events
    added = events[len(t.events) :]
    assert Counter(e["name"] for e in added if e["ph"] == "X") == {
        "step 1: 0.100 ms": 1,
        "step 2: 0.100 ms": 1,
        "step 3: 0.100 ms": 1,
        "unattributed": 12,
    }
    assert (
        sum(e["dur"] for e in added if e["name"] == "unattributed") / 3 / 1000
        == report.idle["unattributed"]
    )
    assert {(e["pid"], e["tid"]) for e in added if e["ph"] == "X"} == {
        (101, 102),
        (101, 103),
    }  # after tid 100


def test_free_ids_take_the_first_unused_block() -> None:
    assert free_ids(frozenset({0, 1, 404, 432}), 5) == 433
    assert free_ids(frozenset(), 3) == 1
    # ids near Perfetto's 32-bit limit: a block below, clear of every id used
    used = frozenset({2**31 - 2, 1 << 20, (1 << 20) + 4})
    assert free_ids(used, 4) == (1 << 20) + 8


@pytest.fixture(scope="module")
def ddp_annotated(tmp_path_factory):  # type: ignore[no-untyped-def]
    """ddp2_h100/slow diagnosed once with --annotate, for the two tests below (which only read it)."""
    target = tmp_path_factory.mktemp("ddp") / "ddp.trace.json.gz"
    return analyze_inputs([DDP], jobs=1, annotate=target), target


def test_each_rank_gets_its_annotated_trace(ddp_annotated: tuple) -> None:
    report, target = ddp_annotated
    files = [rank_file(target, r) for r in (0, 1)]
    assert [f.name for f in files] == ["ddp.trace.rank0.json.gz", "ddp.trace.rank1.json.gz"]
    assert target.exists()  # both merged on rank 0's clock (the next test)
    for rank, f in enumerate(files):
        events = _events(f)
        original = _events(DDP / f"rank{rank}" / "trace.json.gz")
        assert events[: len(original)] == original
        assert sum(e.get("name") == "thread_name" and e.get("cat") == CAT for e in events) > 2
    assert report.annotated_trace.file == str(files[1])  # the straggler's report, and its file


def _job_with_a_broken_rank(tmp_path: Path) -> Path:
    """DDP copied, rank 1's trace cut short: its gzip stream ends early."""
    job = tmp_path / "job"
    shutil.copytree(DDP, job)
    broken = job / "rank1" / "trace.json.gz"
    broken.write_bytes(broken.read_bytes()[:20_000])
    return job


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_job_that_fails_leaves_no_annotated_file(tmp_path: Path, jobs: int) -> None:
    """Rank 0 is annotated, rank 1 fails to read: neither rank's file nor the merge is left, and
    files of an earlier run at those names are as they were."""
    job = _job_with_a_broken_rank(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    target = out / "ddp.trace.json.gz"
    rank_file(target, 1).write_bytes(b"an earlier run's")
    with pytest.raises(
        TraceFormatError, match=r"rank1/trace\.json\.gz is a truncated or corrupt gzip file"
    ):
        analyze_inputs([job], jobs=jobs, annotate=target)
    assert sorted(p.name for p in out.iterdir()) == ["ddp.trace.rank1.json.gz"]
    assert rank_file(target, 1).read_bytes() == b"an earlier run's"


def test_a_job_whose_merge_fails_leaves_no_annotated_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpudoctor.report.perfetto_merge as perfetto_merge

    def broken(*args: object, **kwargs: object) -> bool:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(perfetto_merge, "merge_ranks", broken)
    target = tmp_path / "ddp.trace.json.gz"
    with pytest.raises(OSError, match="No space left on device"):
        analyze_inputs([DDP], jobs=1, annotate=target)
    assert list(tmp_path.iterdir()) == []


def test_the_cli_says_in_one_line_why_a_job_was_not_annotated(tmp_path: Path) -> None:
    job = _job_with_a_broken_rank(tmp_path)
    target = tmp_path / "ddp.trace.json.gz"
    out = gd("analyze", str(job), "--perfetto", str(target))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert f"{job}/rank1/trace.json.gz is a truncated or corrupt gzip file" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job"]


def test_the_ranks_are_merged_on_rank_0s_clock_with_the_straggler_marked(
    ddp_annotated: tuple,
) -> None:
    """ddp2_h100/slow: rank 1 straggles (host work), rank 0 waits 48.76 ms a step in its all-reduces;
    rank 1's clock runs 8.98 us ahead of rank 0's. Merged, every event of both annotated traces is
    there once, rank 1's moved by its offset, each rank's ids its own, the processes named and
    labelled for their rank."""
    report, target = ddp_annotated
    offsets = {r.rank: r.clock_offset_us for r in report.ranks}
    assert offsets == {0: 0.0, 1: 8.98}
    merged = _events(target)
    per_rank = [_events(rank_file(target, r)) for r in (0, 1)]

    def timed(events: list[dict]) -> int:
        return sum(e.get("ph") != "M" for e in events)

    assert timed(merged) == sum(timed(x) for x in per_rank)
    added = len(merged) - sum(
        len(x) for x in per_rank
    )  # metadata for processes Kineto left unnamed or unsorted
    assert 0 <= added <= 3 * len({e.get("pid") for e in merged})

    # the same kernel on each rank: its start moved by exactly the rank's offset
    def first_kernel(events: list[dict]) -> dict:
        return min((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])

    k1 = first_kernel(per_rank[1])
    moved = [
        e
        for e in merged
        if e.get("cat") == "kernel"
        and e.get("name") == k1["name"]
        and e.get("args", {}).get("correlation") == k1["args"]["correlation"]
        and abs(e["ts"] - (k1["ts"] - 8.98)) < 1e-3
    ]
    assert len(moved) == 1
    # no pid or tid shared by the two ranks (their GPU streams are both 7 in the traces)
    names = {e["pid"]: e["args"]["name"] for e in merged if e.get("name") == "process_name"}
    ranks_of = {
        pid: int(name.split()[1]) for pid, name in names.items() if name.startswith("rank ")
    }
    assert set(ranks_of.values()) == {0, 1} and len(ranks_of) == len(names)
    by_rank: dict[int, set] = {0: set(), 1: set()}
    for e in merged:
        if isinstance(e.get("pid"), int) and e["pid"] in ranks_of and isinstance(e.get("tid"), int):
            by_rank[ranks_of[e["pid"]]].add(e["tid"])
    assert by_rank[0] and by_rank[1] and not (by_rank[0] & by_rank[1])
    labels = [e["args"]["labels"] for e in merged if e.get("name") == "process_labels"]
    assert any(label.endswith("straggler") for label in labels)
    assert any("waits 48.76 ms a step for rank 1" in label for label in labels)
    # the merged file is never over a rank's own
    assert all(_events(rank_file(target, r))[:10] == per_rank[r][:10] for r in (0, 1))


def test_the_merge_reads_and_writes_a_chunk_at_a_time(tmp_path: Path) -> None:
    """Two synthetic ranks written plain (not gzipped): the merge streams them (trace/stream.py
    Chunks.raw_events) and shifts each by its offset; a flow id keeps its rank in its high bits."""
    from gpudoctor.report.perfetto_merge import FLOW_RANK_SHIFT, RankPart, write_merged

    paths = []
    for rank in (0, 1):
        t = TraceBuilder()
        t.step(0, 0, 100)
        corr = t.runtime("cudaLaunchKernel", 10, 4)
        t.kernel("k", 20, 5, corr)
        paths.append(t.write(tmp_path / f"r{rank}.json"))
    out = write_merged(
        [RankPart(0, paths[0], 0.0, ""), RankPart(1, paths[1], 2.5, "straggler")],
        tmp_path / "m.json",
    )
    merged = _events(out)
    kernels = sorted(e["ts"] for e in merged if e.get("name") == "k")
    assert kernels == sorted(
        [e["ts"] for e in _events(paths[0]) if e.get("name") == "k"]
        + [e["ts"] - 2.5 for e in _events(paths[1]) if e.get("name") == "k"]
    )
    flows = [e for e in merged if e.get("ph") in ("s", "f")]
    assert {e["id"] >> FLOW_RANK_SHIFT for e in flows} <= {0, 1}
    with pytest.raises(Exception, match="--perfetto"):
        write_merged([RankPart(0, paths[0], 0.0, "")], paths[0])  # never over a rank's own file


def test_several_unrelated_traces_are_refused(tmp_path: Path) -> None:
    from gpudoctor.errors import InputError

    with pytest.raises(
        InputError, match="--perfetto writes the annotated trace of one trace or one job"
    ):
        analyze_inputs([HOST_SYNC, INFERENCE], annotate=tmp_path / "x.json.gz")
    assert not list(tmp_path.iterdir())


# --- the command line ------------------------------------------------------------------------------


def _one_line_error(out) -> str:  # type: ignore[no-untyped-def]
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in out.stderr, (
        out.stderr
    )
    return lines[0]


def test_cli_writes_the_file_and_the_page_points_into_it(tmp_path: Path) -> None:
    target, page = tmp_path / "a.json.gz", tmp_path / "r.html"
    out = gd("analyze", str(HOST_SYNC), "--perfetto", str(target), "--html", str(page))
    assert out.returncode == 0, out.stderr
    assert (
        f"annotated trace written to {target} (open at ui.perfetto.dev or in chrome://tracing)"
        in out.stderr
    )
    assert target.read_bytes()[:2] == b"\x1f\x8b"
    html = page.read_text()
    assert html.count(f"In the annotated trace <code>{target}</code>") == 3
    assert (
        "track <code>gpudoctor: 1. host-sync</code>, slice <code>host-sync: saves 4.661 ms/step (x1.80)</code>, "
        "1.835 ms after the trace's start (ts 4450988834786.052 µs)"
    ) in html


@pytest.mark.parametrize("where", ["missing-folder", "the-input", "the-page"])
def test_cli_refuses_an_output_it_cannot_or_must_not_write(tmp_path: Path, where: str) -> None:
    source = tmp_path / "trace.json.gz"
    shutil.copy(HOST_SYNC, source)
    before = _digest(source)
    target = {
        "missing-folder": tmp_path / "no" / "a.json.gz",
        "the-input": source,
        "the-page": tmp_path / "r.html",
    }[where]
    line = _one_line_error(
        gd("analyze", str(source), "--perfetto", str(target), "--html", str(tmp_path / "r.html"))
    )
    assert (
        line
        == {
            "missing-folder": f"error: --perfetto {target}: folder {target.parent} does not exist; create it or choose "
            "another path",
            "the-input": f"error: --perfetto {target} is an input of this command ({target}): writing there would destroy "
            "it; give another file path such as annotated.trace.json.gz",
            "the-page": f"error: --perfetto {target} is also the --html page: give the annotated trace its own file, such "
            "as annotated.trace.json.gz",
        }[where]
    )
    assert _digest(source) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json.gz"]


# --- the run bundle and the page ---------------------------------------------------------------------


def test_a_live_bundle_holds_the_annotated_trace(tmp_path: Path) -> None:
    from gpudoctor.capture.session import CaptureConfig, CaptureResult
    from gpudoctor.live import diagnose_capture

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(HOST_SYNC, run / "trace.json.gz")
    report, note = diagnose_capture(
        CaptureResult(trace_path=run / "trace.json.gz", device="cuda"), CaptureConfig(), run
    )
    assert note == ""
    assert sorted(p.name for p in run.iterdir()) == [
        "annotated.trace.json.gz",
        "env.json",
        "report.html",
        "report.json",
        "trace.json.gz",
    ]
    saved = json.loads((run / "report.json").read_text())["annotated_trace"]
    assert saved["file"] == "annotated.trace.json.gz" and list(saved["findings"]) == [
        f.id for f in report.findings
    ]
    assert (
        "In the annotated trace <code>annotated.trace.json.gz</code>"
        in (run / "report.html").read_text()
    )
    assert (
        analyze_path(run).findings[0].id == report.findings[0].id
    )  # the bundle still reads its own trace


def _capture(run: Path):  # type: ignore[no-untyped-def]
    from gpudoctor.capture.session import CaptureConfig, CaptureResult
    from gpudoctor.live import diagnose_capture

    return diagnose_capture(
        CaptureResult(trace_path=run / "trace.json.gz", device="cuda"), CaptureConfig(), run
    )


def test_a_bundle_of_a_big_trace_holds_no_annotated_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ANNOTATED_COPY_UP_TO bytes of trace the copy is left out, a one-line note saying how to
    write it; the command it names writes it."""
    import gpudoctor.live as live

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(HOST_SYNC, run / "trace.json.gz")
    size = (run / "trace.json.gz").stat().st_size
    monkeypatch.setattr(live, "ANNOTATED_COPY_UP_TO", size - 1)
    report, note = _capture(run)
    assert note == (
        f"annotated.trace.json.gz was not written: the trace it copies is {size / 2**20:,.1f} MB and the copy would be about "
        f"as big (a bundle holds one up to {(size - 1) / 2**20:,.1f} MB, about as much as Perfetto's UI opens in a "
        f"browser); to write it: gpudoctor analyze {run} --perfetto {run}/annotated.trace.json.gz"
    )
    assert sorted(p.name for p in run.iterdir()) == [
        "env.json",
        "report.html",
        "report.json",
        "trace.json.gz",
    ]
    assert report.annotated_trace is None and "annotated_trace" not in json.loads(
        (run / "report.json").read_text()
    )
    out = gd("analyze", str(run), "--perfetto", str(run / "annotated.trace.json.gz"))
    assert out.returncode == 0, out.stderr
    assert _events(run / "annotated.trace.json.gz")
    # a trace of just that size gets its copy
    shutil.rmtree(run)
    run.mkdir()
    shutil.copy(HOST_SYNC, run / "trace.json.gz")
    monkeypatch.setattr(live, "ANNOTATED_COPY_UP_TO", size)
    assert _capture(run).note == "" and (run / "annotated.trace.json.gz").is_file()


def test_a_bundle_on_a_full_disk_holds_no_annotated_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gpudoctor.live as live

    run = tmp_path / "my run"
    run.mkdir()
    shutil.copy(HOST_SYNC, run / "trace.json.gz")
    size = (run / "trace.json.gz").stat().st_size
    asked: list[Path] = []
    free = live.DISK_KEPT_FREE + size - 1

    def free_bytes(folder: Path) -> int:
        asked.append(folder)
        return free

    monkeypatch.setattr(live, "free_bytes", free_bytes)
    _, note = _capture(run)
    assert asked == [run]
    assert note == (
        f"annotated.trace.json.gz was not written: its disk has {free / 2**20:,.1f} MB free and the copy would take "
        f"about {size / 2**20:,.1f} MB of the 1,024.0 MB kept free; to write it: gpudoctor analyze '{run}' "
        f"--perfetto '{run}/annotated.trace.json.gz'"
    )
    assert not (run / "annotated.trace.json.gz").exists()
    free += 1  # room for the copy and the reserve: written
    assert _capture(run).note == "" and (run / "annotated.trace.json.gz").is_file()


def test_a_distributed_run_points_at_the_chosen_ranks_annotated_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank's bundle gets its annotated trace; RUN's combined report (the straggler's, rank 1's
    here) points into that rank's bundle."""
    from test_rank_window import _two_bundles

    import gpudoctor.capture.rank_window as rank_window
    from gpudoctor.capture.session import CaptureConfig, CaptureResult
    from gpudoctor.live import combine_ranks, diagnose_capture

    # one process plays both ranks: their capture counts (the agreement keys' prefix) start afresh,
    # whatever captures earlier tests in this process made (tests/test_rank_window.py does the same)
    monkeypatch.setattr(rank_window, "_CAPTURES", {})

    sync = _two_bundles(tmp_path)
    run = sync.run_dir()
    for rank in (0, 1):
        bundle = run / f"rank{rank}"
        shutil.copy(DDP / f"rank{rank}" / "trace.json.gz", bundle / "trace.json.gz")
        diagnose_capture(
            CaptureResult(trace_path=bundle / "trace.json.gz", device="cuda"),
            CaptureConfig(),
            bundle,
        )
        assert (bundle / "annotated.trace.json.gz").is_file()
    report, note = combine_ranks(sync, None)
    assert (
        note == ""
        and report is not None
        and [row.straggler for row in report.ranks] == [False, True]
    )
    saved = json.loads((run / "report.json").read_text())["annotated_trace"]
    assert saved["file"] == "rank1/annotated.trace.json.gz"
    own = json.loads((run / "rank1" / "report.json").read_text())["annotated_trace"]
    assert saved["findings"] == own["findings"]
    assert (
        "In the annotated trace <code>rank1/annotated.trace.json.gz</code>"
        in (run / "report.html").read_text()
    )
    # and RUN holds both ranks' on rank 0's clock
    merged = _events(run / "annotated.trace.json.gz")
    assert any(
        "straggler" in e["args"]["labels"] for e in merged if e.get("name") == "process_labels"
    )
    assert sum(e.get("ph") != "M" for e in merged) == sum(
        e.get("ph") != "M"
        for r in (0, 1)
        for e in _events(run / f"rank{r}" / "annotated.trace.json.gz")
    )


def test_a_distributed_run_of_big_traces_holds_no_merged_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank's copy is within ANNOTATED_COPY_UP_TO, the two together are not: RUN's merge is
    left out, the combined report warning how to write it."""
    from test_rank_window import _two_bundles

    import gpudoctor.capture.rank_window as rank_window
    import gpudoctor.live as live
    from gpudoctor.capture.session import CaptureConfig, CaptureResult
    from gpudoctor.live import combine_ranks, diagnose_capture

    monkeypatch.setattr(rank_window, "_CAPTURES", {})
    sync = _two_bundles(tmp_path)
    run = sync.run_dir()
    for rank in (0, 1):
        bundle = run / f"rank{rank}"
        shutil.copy(DDP / f"rank{rank}" / "trace.json.gz", bundle / "trace.json.gz")
        assert (
            diagnose_capture(
                CaptureResult(trace_path=bundle / "trace.json.gz", device="cuda"),
                CaptureConfig(),
                bundle,
            ).note
            == ""
        )
    copies = sum((run / f"rank{r}" / "annotated.trace.json.gz").stat().st_size for r in (0, 1))
    monkeypatch.setattr(live, "ANNOTATED_COPY_UP_TO", copies - 1)
    report, note = combine_ranks(sync, None)
    assert note == "" and report is not None
    assert report.warnings[-1] == (
        f"the ranks' merged annotated trace was not written: the 2 traces it copies are {copies / 2**20:,.1f} MB and the copy "
        f"would be about as big (a bundle holds one up to {(copies - 1) / 2**20:,.1f} MB, about as much as Perfetto's "
        f"UI opens in a browser); to write it: gpudoctor analyze {run} --perfetto {run}/annotated.trace.json.gz"
    )
    assert not (run / "annotated.trace.json.gz").exists()
    assert (
        json.loads((run / "report.json").read_text())["annotated_trace"]["file"]
        == "rank1/annotated.trace.json.gz"
    )
    out = gd("analyze", str(run), "--perfetto", str(run / "annotated.trace.json.gz"))
    assert out.returncode == 0, out.stderr
    assert any(
        "straggler" in e["args"]["labels"]
        for e in _events(run / "annotated.trace.json.gz")
        if e.get("name") == "process_labels"
    )


def test_the_page_with_trace_notes_renders_in_chromium(host_sync, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    report = msgspec.structs.replace(
        host_sync[0],
        annotated_trace=msgspec.structs.replace(
            host_sync[0].annotated_trace, file="<script>alert(1)</script>.json.gz"
        ),
    )
    path = tmp_path / "report.html"
    path.write_text(render_html(report), encoding="utf-8")
    page = load_page(path)
    assert page.console_errors == []
    assert (
        page.dom.count(
            "In the annotated trace <code>&lt;script&gt;alert(1)&lt;/script&gt;.json.gz</code>"
        )
        == 3
    )
    assert "<script" not in page.dom.lower()
