"""epochlog: a replicated, partitioned log for Kubernetes that does not lose acknowledged data.

This package is the ground floor: what every other part shares (protocol error codes,
wire and resource models, security, the client). The broker, the operator and the
Spark source build on it; the `epochlog` command and the development tools sit on
top of them all, in `epochlog_tools`.
"""

__version__ = "0.1.0"
