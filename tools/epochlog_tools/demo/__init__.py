"""`make demo` (`epochlog demo`): what epochlog promises, shown on real processes.

- `cluster`: the embedded cluster, a leader SIGKILLed under acks=all writes
  while the Spark order pipeline (`pipeline`) reads the topic; every
  acknowledged record read back once, and the job's outputs equal to the log.
- `storage` (`epochlog demo --storage`): the storage walkthrough on the real
  disk and on the crash-simulating one.
"""

from epochlog_tools.demo.cluster import run_cluster_demo
from epochlog_tools.demo.storage import run_demo

__all__ = ["run_cluster_demo", "run_demo"]
