"""Benchmarks run by `make bench`; each prints its figures next to a same-run baseline."""
