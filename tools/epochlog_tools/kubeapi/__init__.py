"""A Kubernetes API emulator for development and tests.

Production runs on a real Kubernetes cluster. This package emulates the part of
the Kubernetes API that epochlog uses, in one local process, so that the
operator, `kubectl` and the tests can run without a cluster: custom resources
defined by the CRDs in `crds/` (schema validation, defaulting and CEL rules,
the status subresource, `metadata.generation`, resourceVersion and uid
conflicts), namespaces, core/v1 Events and Secrets, watches within a window of
recent changes (410 Expired before it), merge, JSON and (for built-in kinds)
strategic merge patches, a coarse server-side apply, discovery and `kubectl get`
tables.

It is built on kmock's `KubernetesEmulator` (`emulator.py`) and extends it where
a real API server behaves differently in ways that matter to a controller.
Run it with `python -m epochlog_tools.kubeapi.apiserver --port N --crds crds/
--kubeconfig PATH`, or in-process with `epochlog_tools.kubeapi.apiserver.ApiServer`.
"""
