"""The wire: every byte and JSON body that crosses between epochlog's processes.

The bottom layer. Brokers, the operator, clients, the simulator and the local
cluster all speak through these modules and nothing here imports any of them:

- `wire`: the naming rule (snake_case in Python, camelCase on the wire) and the
  base model every body derives from.
- `errors`: typed errors with their protocol codes, and the error body.
- `batch`: the record batch codec (the unit the log stores and replicates).
- `framing`: the binary body that carries stored batches.
- `heartbeat`: broker <-> controller heartbeats and assignments.
- `bodies`: client and replica HTTP bodies (produce, read, offsets, listing,
  replica fetch).
"""
