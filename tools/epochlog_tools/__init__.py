"""epochlog's top floor: the `epochlog` command and the tools built on every other part.

It imports the broker, the operator and the Spark package, and nothing imports it:
the command line (`cli`), `make demo` (`demo`), the local cluster on loopback and the
nemesis (`devcluster`), the deterministic simulator (`sim`), the process harness
(`harness`), the Kubernetes API emulator (`kubeapi`) and the history checker
(`checker`). The ground floor, `epochlog`, holds what the broker, the operator, the
Spark source and client applications share.
"""
