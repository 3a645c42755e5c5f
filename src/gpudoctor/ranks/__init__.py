"""Multi-rank analysis: rank summaries in, clock alignment, the multi-GPU findings and the per-rank
table out. Every function here works on small per-rank summaries (ranks/summary.py), never on
more than one rank's events at a time; pipeline.analyze_ranks computes the summaries in worker
processes and calls :func:`ranks.combine.combine`."""
