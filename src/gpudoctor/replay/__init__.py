"""The step as a dependency graph, replayed: what a fix is worth, with the profiler's time taken
out.

graph.py builds the graph from a trace, simulate.py replays it, observer.py takes the profiler's
own time out of it, edits.py turns a fix into changes of it, pace.py runs the host left after a
fix at the pace of its smaller work. ARCHITECTURE.md "The replay".
"""
