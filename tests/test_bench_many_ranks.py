"""benchmarks/bench_many_ranks.py's --runs mode: the process-tree memory sum it samples (a pure
function over pid maps, here) and its table."""

from __future__ import annotations

from script_module import load

b = load("bench_many_ranks")
MIB = 2**20


def test_tree_rss_sums_root_and_descendants_only() -> None:
    children = {10: [11, 12], 11: [13], 12: [], 13: [], 99: [100]}
    rss = {10: 50 * MIB, 11: 40 * MIB, 12: 30 * MIB, 13: 5 * MIB, 99: 1000 * MIB, 100: 7 * MIB}
    assert b.tree_rss(children, rss, 10) == 125 * MIB  # 99 and 100 are not under 10
    assert b.tree_rss(children, rss, 11) == 45 * MIB


def test_tree_rss_counts_an_exited_child_0_and_a_repeated_pid_once() -> None:
    children = {1: [2, 3, 2], 2: [], 3: [2]}
    rss = {1: 10, 2: 3}  # 3 exited between reading the tree and its memory
    assert b.tree_rss(children, rss, 1) == 13


def test_runs_table_row() -> None:
    row = {
        "run": "ddp-sick",
        "ranks": 4,
        "jobs": 2,
        "gz_mb": 5.08,
        "wall_s": 3.456,
        "tree_rss_mib": 160.4,
        "tree_pss_mib": 110.6,
        "largest_mib": 70.2,
        "one_wall_s": 1.234,
        "one_mib": 65.0,
    }
    assert (
        b.runs_table([row]).splitlines()[-1]
        == "| ddp-sick | 4 | 5.1 | 2 | 3.46 | 160 / 111 | 70 | 1.23 / 65 |"
    )
