"""Deterministic simulation of an epochlog cluster, running the real broker and controller code.

`Sim` (in `scenario`) is the scripting API; `runner` runs random fault
schedules for `epochlog sim`; `checker` holds the properties every run must
keep; `legacy` the old behaviours the checker must catch.
"""
