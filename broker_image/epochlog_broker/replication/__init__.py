"""Replication rules of the broker as pure state machines: roles, epochs, high watermark, ISR."""
