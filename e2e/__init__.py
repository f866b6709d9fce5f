"""Slow end-to-end scenarios: the built images under podman, whole clusters (`make e2e`).

They take minutes (an image build on a cold machine), so they are outside tests/ and
`make test`; each builds or starts what it needs itself. The chart scenarios run on the
embedded cluster, or on a real one when EPOCHLOG_E2E_KUBECONFIG is set (e2e/targets.py).
"""
