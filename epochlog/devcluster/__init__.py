"""The local cluster: the Kubernetes API emulator, the operator and brokers as processes.

`local` runs a whole cluster on loopback for `epochlog demo` and
`epochlog dev ...` (its processes are started and stopped through
`epochlog.harness`); `partitions` reads and writes the Partition objects as
typed models; `local_workload` drives traffic; `nemesis` injects faults into
real processes and judges the outcome with `epochlog.checker`. The API emulator
itself lives in `epochlog.kubeapi`.
"""
