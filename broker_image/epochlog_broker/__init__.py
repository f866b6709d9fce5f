"""The epochlog broker: durable partition logs, replication and the HTTP log server.

Layers, lowest first: `log` (segments, index, recovery, checkpoint files, the
file-system interface), `replication` (pure rules: roles, epochs, high watermark,
ISR), then the aiohttp server that wires them to disk and network.
"""
