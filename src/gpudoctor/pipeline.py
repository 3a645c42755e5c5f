"""The offline doctor end to end: path -> Trace -> Analysis -> findings -> Report."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from gpudoctor.analysis import Analysis, analyze_trace
from gpudoctor.analysis.collectives import MIN_COMM_SHARE
from gpudoctor.analysis.host_breakdown import host_breakdown, no_gpu_work_note
from gpudoctor.analysis.idle import GPU_WAIT
from gpudoctor.analysis.steps import describe, segment, whole_steps
from gpudoctor.core.loader import LoaderSettings
from gpudoctor.errors import EmptyTraceError, InputError, NoGpuActivityError
from gpudoctor.hardware.ceilings import (
    Ceilings,
    for_gpu_name,
    from_spec,
    load_file,
    unavailable,
    unknown_card_note,
)
from gpudoctor.hardware.machine import collectives_profile_for, measured_ceilings_for
from gpudoctor.hardware.specs import find_spec
from gpudoctor.ranks.sources import RankSource, rank_sources
from gpudoctor.ranks.sources import is_rank_set as is_rank_set
from gpudoctor.report.build import all_fixes_section, build_host_report, build_report
from gpudoctor.report.model import Report, Reports
from gpudoctor.report.sections import AnnotatedTraceSection, UnprofiledSection
from gpudoctor.rules.calibrate import priced
from gpudoctor.rules.registry import PEAK_PRICED, find, skipped_rules
from gpudoctor.trace import Trace, load
from gpudoctor.trace.capabilities import check_usable, lacking_notes, trace_notes
from gpudoctor.trace.load import none_readable, resolve_trace_path
from gpudoctor.trace.stream import release_free_memory

if TYPE_CHECKING:
    from gpudoctor.capture.model_state import ModelState
    from gpudoctor.ranks.combine import RanksResult
    from gpudoctor.ranks.summary import RankSummary

DEFAULT_GPU = "h100-sxm"


def choose_ceilings(trace: Trace, gpu: str | None = None, ceilings: Any = None) -> Ceilings:
    """--ceilings FILE, else --gpu NAME, else the GPU named in the trace: its measured profile
    (``gpudoctor bench``) when one was saved on this machine, else its datasheet row."""
    if isinstance(ceilings, Ceilings):
        return ceilings
    if ceilings is not None:
        return load_file(ceilings)
    if gpu:
        return for_gpu_name(gpu)
    if trace.gpu and trace.gpu.name:
        # a card the table does not know still gets its report: the host side and the idle causes
        # need no peak rates (``unavailable`` ceilings leave out what does, and the report says so)
        measured = measured_ceilings_for(trace.gpu.name)
        if measured is not None:
            return measured
        return from_spec(spec) if (spec := find_spec(trace.gpu.name)) else unavailable(
            trace.gpu.name)
    if len(trace.device):
        # GPU work on a card the trace does not name (an empty name, no deviceProperties): as a
        # card the table does not know
        return unavailable("")
    raise NoGpuActivityError(
        f"{trace.source} names no GPU (no deviceProperties); pass --gpu NAME (e.g. --gpu "
        f"{DEFAULT_GPU}) or --ceilings FILE"
    )


class Diagnosis(msgspec.Struct, frozen=True, eq=False):
    """A report and the analysis it was drawn from (None for a trace with no GPU work): what the
    annotated trace draws (report/perfetto.py)."""

    report: Report
    analysis: Analysis | None


def analyze_loaded(
    trace: Trace, gpu: str | None = None, ceilings: Any = None,
    unprofiled_step_ms: float | None = None, model_state: ModelState | None = None,
    step_source: str = "", cut_after: int | None = None, *,
    unprofiled_fetch_ms: float | None = None, loader: LoaderSettings | None = None,
    unprofiled_lead_ms: float | None = None,
) -> Report:
    """Diagnose a loaded trace; ``unprofiled_step_ms`` (the step timed without the profiler)
    re-prices host-side findings for the program as it really runs (rules/calibrate.py), and
    ``unprofiled_fetch_ms`` is the DataLoader's share of it where the capture timed that;
    ``step_source`` (what marked a live capture's steps) is named in ``report.steps``;
    ``cut_after``: the window ended early (the program raised) after this many whole steps, and
    the step it cut short is left out (analysis/steps.py ``whole_steps``)."""
    return diagnose_loaded(trace, gpu, ceilings, unprofiled_step_ms, model_state, step_source,
                           cut_after, unprofiled_fetch_ms=unprofiled_fetch_ms,
                           loader=loader, unprofiled_lead_ms=unprofiled_lead_ms).report


def diagnose_loaded(
    trace: Trace, gpu: str | None = None, ceilings: Any = None,
    unprofiled_step_ms: float | None = None, model_state: ModelState | None = None,
    step_source: str = "", cut_after: int | None = None, *,
    unprofiled_fetch_ms: float | None = None, loader: LoaderSettings | None = None,
    unprofiled_lead_ms: float | None = None, outermost_calls: int | None = None,
    root_module: str = "",
) -> Diagnosis:
    """``analyze_loaded``'s report with its analysis."""
    if len(trace.device) == 0 and len(trace.host) == 0:
        if trace.skipped_events:
            raise EmptyTraceError(none_readable(trace.source, trace.skipped_events))
        raise EmptyTraceError(
            f"{trace.source} holds no profiler events (no host ops, no GPU work): record a window "
            "in which the program runs (torch.profiler.profile around a few steps, or "
            "gpudoctor run)"
        )
    check_usable(trace)  # GPU time, host events, one clock: else nothing sound can be said
    analysis: Analysis | None = None
    if len(trace.device) == 0:
        report = analyze_host_only(trace, unprofiled_step_ms, cut_after)
    else:
        analysis, report = _diagnose_gpu(trace, gpu, ceilings, unprofiled_step_ms, model_state,
                                         step_source, cut_after,
                                         unprofiled_fetch_ms=unprofiled_fetch_ms, loader=loader,
                                         unprofiled_lead_ms=unprofiled_lead_ms,
                                         outermost_calls=outermost_calls,
                                         root_module=root_module)
    if step_source:
        steps = msgspec.structs.replace(report.steps, source=step_source)
        report = msgspec.structs.replace(report, steps=steps)
    return Diagnosis(report, analysis)


def _diagnose_gpu(trace: Trace, gpu: str | None, ceilings: Any, unprofiled_step_ms: float | None,
                  model_state: ModelState | None, step_source: str,
                  cut_after: int | None = None, alone: bool = True, *,
                  unprofiled_fetch_ms: float | None = None,
                  loader: LoaderSettings | None = None,
                  unprofiled_lead_ms: float | None = None,
                  outermost_calls: int | None = None,
                  root_module: str = "") -> tuple[Analysis, Report]:
    """``alone``: the trace is not read with the other ranks of its job (a rank's collectives are
    then said in a note: analysis/collectives.py)."""
    from gpudoctor.analysis.collectives import one_rank_collectives

    chosen = choose_ceilings(trace, gpu, ceilings)
    analysis = analyze_trace(trace, chosen, unprofiled_step_ms, model_state, step_source, cut_after,
                             unprofiled_fetch_ms=unprofiled_fetch_ms, loader=loader,
                             unprofiled_lead_ms=unprofiled_lead_ms,
                             outermost_calls=outermost_calls, root_module=root_module)
    lacking = lacking_notes(trace, skipped_rules(trace))
    if not chosen.available:
        lacking = [unknown_card_note(chosen.gpu, PEAK_PRICED), *lacking]
    collectives = one_rank_collectives(trace, analysis.steps,
                                       analysis.idle.ms(GPU_WAIT)) if alone else None
    if collectives is not None:
        lacking = [collectives.note(), *lacking]
    if lacking:  # what the trace lacks comes first: it qualifies everything after it
        analysis = msgspec.structs.replace(analysis, warnings=(*lacking, *analysis.warnings))
    found = find(analysis)
    release_free_memory()  # as between the analyses (analysis/__init__.py)
    findings, together = priced(found, analysis)
    report = build_report(analysis, findings)
    if collectives is not None:
        report = msgspec.structs.replace(report,
                                         exposed_collectives_share=collectives.exposed_share,
                                         held_share=collectives.held_share)
    elif analysis.step_ms > 0 and analysis.idle.held_ms >= MIN_COMM_SHARE * analysis.step_ms:
        # a GPU idle with work queued, held behind what the trace does not show (report/model.py)
        report = msgspec.structs.replace(report,
                                         held_share=analysis.idle.held_ms / analysis.step_ms)
    # "all fixes together" says more than one fix
    if together is not None and len(together.ids) > 1:
        report = msgspec.structs.replace(report, all_fixes=all_fixes_section(together))
    return analysis, report


def analyze_host_only(trace: Trace, unprofiled_step_ms: float | None = None,
                      cut_after: int | None = None) -> Report:
    """A trace with host events and no GPU work: step times and the host breakdown."""
    steps = whole_steps(segment(trace), cut_after)
    warnings = [no_gpu_work_note(trace)]
    note = describe(steps)
    if note:
        warnings.append(note)
    warnings.extend(trace_notes(trace))
    return build_host_report(trace, steps, host_breakdown(trace, steps), tuple(warnings),
                             unprofiled_step_ms)


def analyze_path(path: str | os.PathLike[str], gpu: str | None = None,
                 ceilings: Any = None) -> Report:
    """A trace file, or a run directory (whose env.json holds the unprofiled step time)."""
    return diagnose_path(path, gpu, ceilings).report


def diagnose_path(path: str | os.PathLike[str], gpu: str | None = None,
                  ceilings: Any = None) -> Diagnosis:
    """``analyze_path``'s report with its analysis."""
    from gpudoctor.capture.bundle import read_run

    run = read_run(path)  # env.json, parsed once
    found = diagnose_loaded(load(path), gpu=gpu, ceilings=ceilings,
                            unprofiled_step_ms=run.unprofiled_step_ms, model_state=run.model_state,
                            step_source=run.step_source, cut_after=run.cut_after,
                            unprofiled_fetch_ms=run.unprofiled_fetch_ms, loader=run.loader,
                            unprofiled_lead_ms=run.unprofiled_lead_ms,
                            outermost_calls=run.outermost_calls,
                            root_module=run.root_module)
    if not run.unprofiled:
        return found
    unprofiled = UnprofiledSection.from_dict(run.unprofiled)
    return Diagnosis(msgspec.structs.replace(found.report, unprofiled=unprofiled), found.analysis)


def annotated(found: Diagnosis, trace: Path, target: Path, label: str,
              inputs: Sequence[str | os.PathLike[str] | None] = ()) -> Report:
    """Write the annotated trace (report/perfetto.py) of ``trace``, the file ``found`` was drawn
    from, to ``target``; the report then says where each finding lies in it, under the name
    ``label`` (the path as given, or the file name beside the report)."""
    from gpudoctor.report.perfetto import write_annotated

    if found.analysis is None:
        raise InputError(f"--perfetto: {trace} recorded no GPU work, so there is no GPU idle or "
                         "finding to draw; annotate a trace recorded on a GPU")
    annotation = write_annotated(trace, found.analysis, found.report.findings, target,
                                 inputs=inputs)
    return msgspec.structs.replace(
        found.report, annotated_trace=AnnotatedTraceSection.from_dict(annotation.entry(label)))


def knob_prices_for(path: str | os.PathLike[str], gpu: str | None = None,
                    ceilings: Any = None) -> dict[str, Any]:
    """The compile knobs' own replayed prices (rules/knob_prices.py) on a run directory or trace,
    by knob id (``KnobPrice.to_dict``): what ``run --try-fixes`` predicts for them. Empty when the
    trace has no GPU work or its step's graph cannot be built."""
    from gpudoctor.rules.whatif import knob_prices_of

    run = _run_model(path, gpu, ceilings)
    if run is None:
        return {}
    return {k: p.to_dict() for k, p in knob_prices_of(*run).items()}


def knobs_together_price_for(path: str | os.PathLike[str], knobs: Sequence[str],
                             fixed_findings: dict[str, str], gpu: str | None = None,
                             ceilings: Any = None) -> dict[str, Any] | None:
    """Several knobs turned together priced by one replay of their edits merged
    (rules/whatif.py ``knobs_together_price``), as ``knob_prices_for`` prices each alone; None
    where one of them has no edit of the step's graph, or the graph cannot be built."""
    from gpudoctor.rules.whatif import knobs_together_price

    run = _run_model(path, gpu, ceilings)
    if run is None:
        return None
    analysis, model = run
    price = knobs_together_price(analysis, model, list(knobs), fixed_findings, find(analysis))
    return price.to_dict() if price is not None else None


def _run_model(path: str | os.PathLike[str], gpu: str | None = None,
               ceilings: Any = None) -> tuple[Analysis, Any] | None:
    """A run directory's (or a trace's) analysis as ``gpudoctor run`` made it, with its timings,
    and its step model (rules/whatif.py ``step_model``); None when the trace has no GPU work or
    its step's graph cannot be built."""
    from gpudoctor.capture.bundle import read_run
    from gpudoctor.rules.whatif import step_model

    run = read_run(path)
    trace = load(path)
    if len(trace.device) == 0:
        return None
    analysis = analyze_trace(trace, choose_ceilings(trace, gpu, ceilings), run.unprofiled_step_ms,
                             run.model_state, run.step_source, run.cut_after,
                             unprofiled_fetch_ms=run.unprofiled_fetch_ms, loader=run.loader,
                             unprofiled_lead_ms=run.unprofiled_lead_ms,
                             outermost_calls=run.outermost_calls,
                             root_module=run.root_module)
    model = step_model(analysis)
    return None if isinstance(model, str) else (analysis, model)


def analyze_inputs(paths: Sequence[str | os.PathLike[str]], *, jobs: int | None = None,
                   ceilings: Any = None, gpu: str | None = None, annotate: Path | None = None,
                   inputs: Sequence[str | os.PathLike[str] | None] = ()) -> Report | Reports:
    """What ``gpudoctor analyze`` reads: one run directory of a distributed job, or several traces
    that are the ranks of one job (ranks/job.py: their distributedInfo, else their collectives), as
    the ranks' combined report; several traces that are not, each diagnosed on its own
    (``Reports``); else one trace or run directory. ``annotate``: write the annotated trace there
    (one per rank, ``rank_file``, for a distributed run), never over one of ``inputs``."""
    # whatever the inputs turn out to be: one trace uses no worker, yet -3 is no count
    check_jobs(jobs)
    if len(paths) == 1:
        if is_rank_set(Path(paths[0])):
            return analyze_ranks(paths, jobs=jobs, ceilings=ceilings, gpu=gpu, annotate=annotate,
                                 inputs=inputs)
        if annotate is None:
            return analyze_path(paths[0], gpu=gpu, ceilings=ceilings)
        found = diagnose_path(paths[0], gpu=gpu, ceilings=ceilings)
        return annotated(found, resolve_trace_path(Path(paths[0])), annotate, str(annotate), inputs)
    from gpudoctor.ranks.job import apart
    from gpudoctor.ranks.sources import traces_of
    from gpudoctor.trace.job import job_facts

    why = apart([job_facts(t) for t in traces_of(paths)])  # a missing path fails here, at once
    if not why:
        return analyze_ranks(paths, jobs=jobs, ceilings=ceilings, gpu=gpu, annotate=annotate,
                             inputs=inputs)
    if annotate is not None:
        raise InputError("--perfetto writes the annotated trace of one trace or one job, and these "
                         f"{len(paths)} traces are not the ranks of one job ({why}); annotate one "
                         "trace at a time: gpudoctor analyze TRACE --perfetto FILE")
    workers = min(jobs or os.cpu_count() or 1, len(paths))
    if workers == 1:
        reports = [analyze_path(p, gpu, ceilings) for p in paths]
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers) as pool:  # in the order given
            reports = list(pool.map(analyze_path, paths, [gpu] * len(paths),
                                    [ceilings] * len(paths)))
    return Reports(tuple(reports), why)


def check_jobs(jobs: int | None) -> None:
    """``--jobs``: a count of worker processes, 1 or more (None: one per core)."""
    if jobs is not None and jobs < 1:
        raise InputError(f"--jobs {jobs}: give a number of worker processes of 1 or more (e.g. "
                         "--jobs 4), or leave it out for one per core")


def analyze_ranks(sources: Sequence[str | os.PathLike[str]], *, jobs: int | None = None,
                  ceilings: Any = None, gpu: str | None = None, annotate: Path | None = None,
                  inputs: Sequence[str | os.PathLike[str] | None] = ()) -> Report:
    """The combined report of a distributed run: ``sources`` is one run directory holding rank
    bundles (``rank{R}/``, or ``trace.rank{R}.json.gz`` side by side), or several trace files or
    rank directories. Each rank is analysed in a worker process (``jobs`` of them, default one per
    core) that sends back its small summary and its single-GPU report, never its events; the
    ranks' clocks are aligned on their collectives and the multi-GPU findings added to the report
    of the straggler (rank 0 when there is none). ``annotate``: each worker also writes its rank's
    annotated trace, to ``rank_file(annotate, rank)``, never over one of ``inputs`` or the ranks'
    files, and ``annotate`` itself gets them all merged on rank 0's clock."""
    # the multi-rank analysis and the worker pool are imported only for a distributed run
    # (_ranks_result): for one trace they were 0.027 s and 0.011 s of the imports (python -X
    # importtime, 2-core x86_64)
    ranks = rank_sources([Path(p) for p in sources])
    check_jobs(jobs)
    workers = min(jobs or os.cpu_count() or 1, len(ranks))
    # no annotated trace over any of them
    kept = [*inputs, *(f for r in ranks for f in (r.trace, r.env))]
    if annotate is None:
        return _ranks_report(ranks, workers, gpu, ceilings)
    # the ranks' annotated traces and their merge are written under hidden names and put in place
    # together once the whole job is analysed: a rank that fails leaves none of them behind
    finals = [*(rank_file(annotate, r.rank) for r in ranks), annotate]
    from gpudoctor.outputs import staged_files  # (secrets, hmac): one trace's analysis writes none

    with staged_files(finals, "--perfetto", kept) as staged:
        files = dict(zip((r.rank for r in ranks), staged))
        result, reports = _ranks_result(ranks, workers, gpu, ceilings,
                                        [(files[r.rank], kept, str(rank_file(annotate, r.rank)))
                                         for r in ranks])
        from gpudoctor.report.perfetto_merge import merge_ranks  # every rank's on rank 0's clock

        merge_ranks(result.rows, files.__getitem__, staged[-1], inputs=kept)
    return _combined_report(result, reports)


def _ranks_report(ranks: list[RankSource], workers: int, gpu: str | None, ceilings: Any) -> Report:
    return _combined_report(*_ranks_result(ranks, workers, gpu, ceilings, [None] * len(ranks)))


def _ranks_result(ranks: list[RankSource], workers: int, gpu: str | None, ceilings: Any,
                  targets: list[tuple[Path, list[Any], str] | None]) -> tuple[RanksResult,
                                                                              list[Report]]:
    """Each rank summarized (in ``workers`` processes), and their combination."""
    from concurrent.futures import ProcessPoolExecutor

    from gpudoctor.ranks.combine import combine

    if workers == 1:
        results = [_summarize_rank(r, gpu, ceilings, t) for r, t in zip(ranks, targets)]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            # one task per rank, results in rank order; each worker holds one trace at a time
            results = list(pool.map(_summarize_rank, ranks, [gpu] * len(ranks),
                                    [ceilings] * len(ranks), targets))
    summaries = [s for s, _ in results]
    # this machine's measured NCCL curves (gpudoctor bench), when the GPU's profile has them
    table = collectives_profile_for(summaries[0].gpu) if summaries[0].gpu else None
    return combine(summaries, str(table) if table else None), [r for _, r in results]


def _combined_report(result: RanksResult, reports: list[Report]) -> Report:
    """The chosen rank's single-GPU report with the per-rank table and the multi-GPU findings."""
    from gpudoctor.ranks import stage_imbalance
    from gpudoctor.ranks.straggler import priced_unprofiled

    base = reports[result.chosen]
    ranked = tuple(stage_imbalance.priced_unprofiled(priced_unprofiled(f, base.unprofiled_step_ms,
                                                                       base.step_ms),
                                                     base.unprofiled_step_ms)
                   for f in result.findings)
    findings = tuple(sorted((*ranked, *base.findings), key=lambda f: -f.saving_ms))
    warnings = (*result.warnings, *base.warnings)
    return msgspec.structs.replace(base, source=result.source, findings=findings,
                                   warnings=warnings, ranks=result.rows,
                                   distributed=result.distributed)


def rank_file(target: Path, rank: int) -> Path:
    """Rank ``rank``'s file of a per-rank output named ``target``: ``.rank<R>`` before ``.json``
    (``out.trace.json.gz`` -> ``out.trace.rank3.json.gz``), else at the end of the name."""
    name = target.name
    at = name.rfind(".json")
    at = len(name) if at <= 0 else at
    return target.with_name(f"{name[:at]}.rank{rank}{name[at:]}")


def _summarize_rank(source: RankSource, gpu: str | None, ceilings: Any,
                    annotate: tuple[Path, list[Any], str]
                    | None = None) -> tuple[RankSummary, Report]:
    """One rank in its worker: load, diagnose, summarize (``annotate``: also write the rank's
    annotated trace to that file, never over one of the files listed, the report naming it by the
    label that follows); the trace is dropped on return."""
    from gpudoctor.capture.bundle import facts_of, read_json_object
    from gpudoctor.ranks.summary import summarize, summarize_host

    env = read_json_object(source.env) if source.env is not None else {}
    run = facts_of(env)
    trace = load(source.trace)
    if len(trace.device) == 0 and len(trace.host):  # a CPU (gloo) job: host ranges, no GPU timeline
        report = analyze_loaded(trace, unprofiled_step_ms=run.unprofiled_step_ms)
        return summarize_host(trace, segment(trace), source.rank, env), report
    check_usable(trace)
    analysis, report = _diagnose_gpu(trace, gpu, ceilings, run.unprofiled_step_ms, run.model_state,
                                     run.step_source, alone=False,
                                     unprofiled_fetch_ms=run.unprofiled_fetch_ms, loader=run.loader,
                                     unprofiled_lead_ms=run.unprofiled_lead_ms,
                                     outermost_calls=run.outermost_calls,
                             root_module=run.root_module)
    if annotate is not None:
        target, kept, label = annotate
        report = annotated(Diagnosis(report, analysis), source.trace, target, label, kept)
    sync = sum(f.saving_ms for f in report.findings if f.id == "host-sync")
    return dataclasses.replace(summarize(analysis, source.rank, env),
                               sync_saving_ms=round(sync, 6)), report
