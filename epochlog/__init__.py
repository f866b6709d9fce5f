"""epochlog: a replicated, partitioned log for Kubernetes that does not lose acknowledged data.

This package holds what every part shares: protocol error codes, wire and
resource models, the client, the `epochlog` CLI and the embedded local cluster.
"""

__version__ = "0.1.0"
