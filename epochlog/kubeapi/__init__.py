"""A Kubernetes API emulator for development and tests.

Production runs on a real Kubernetes cluster. This package emulates the part of
the Kubernetes API that epochlog uses, in one local process, so that the
operator, `kubectl` and the tests can run without a cluster: custom resources
defined by the CRDs in `crds/` (schema validation, defaulting and CEL rules,
the status subresource, `metadata.generation`, resourceVersion conflicts),
namespaces, core/v1 Events, watches, discovery and `kubectl get` tables.

It is built on kmock's `KubernetesEmulator` (`emulator.py`) and extends it where
a real API server behaves differently in ways that matter to a controller.
Run it with `python -m epochlog.kubeapi.apiserver --port N --crds crds/
--kubeconfig PATH`, or in-process with `epochlog.kubeapi.apiserver.ApiServer`.
"""
