"""Judging a run: what happened (`history`) and the properties it must keep (`checks`).

Used by the deterministic simulator (`epochlog_tools.sim`, with ground truth only it
can see) and by the real-process nemesis (`epochlog_tools.devcluster.nemesis`, with
what clients and a status watch observed). Imports neither.
"""
