"""The local cluster: the Kubernetes API emulator, the operator and brokers as processes.

`local` runs a whole cluster on loopback for `epochlog demo` and
`epochlog local ...`; `local_process` starts and stops its processes;
`local_workload` drives traffic; `nemesis` injects faults into real processes
and judges the outcome with `epochlog.checker`. The API emulator itself lives in
`epochlog.kubeapi`.
"""
