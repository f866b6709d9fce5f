"""The wire: every byte and JSON body that crosses between epochlog's processes.

The bottom layer. Brokers, the operator, clients, the simulator and the local
cluster all speak through these modules and nothing here imports any of them:

- `wire`: the naming rule (snake_case in Python, camelCase on the wire) and the
  base model every body derives from.
- `epochs`: `NO_EPOCH`, the one sentinel for "no leader epoch", and how the
  status, heartbeats and the partition listing spell it.
- `errors`: typed errors with their protocol codes, and the error body.
- `batch`: the record batch codec (the unit the log stores and replicates).
- `framing`: the binary body that carries stored batches.
- `heartbeat`: broker <-> controller heartbeats and assignments.
- `bodies`: the client API's bodies and query parameter names (produce, read,
  ListOffsets, the partition listing, health and readiness).
- `replica`: the replica fetch and offsets-for-leader-epoch bodies, and the
  header of the framed fetch answer.

No wire name is spelt outside these modules, `epochlog.resources` and
`epochlog.crd`.
"""
