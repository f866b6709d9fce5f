"""The local cluster: the Kubernetes API emulator, the operator and brokers as processes.

`local` runs a whole cluster on loopback for `epochlog demo` and
`epochlog dev ...` (its processes are started and stopped through
`epochlog_tools.harness`); `partitions` reads and writes the Partition objects as
typed models; `local_workload` drives traffic; `nemesis` injects faults into
real processes and judges the outcome with `epochlog_tools.checker`. The API emulator
itself lives in `epochlog_tools.kubeapi`.
"""
