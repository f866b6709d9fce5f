"""The Kafka protocol on a broker: existing Kafka clients produce to and read from
epochlog's Partitions through the same core as the HTTP API.

`wire` (frames, headers, versions; kio's messages), `records` (Kafka's record batch
to and from epochlog's), `metadata` (the cluster as Metadata shows it), `errors`
(Kafka's codes for epochlog's errors), `handlers` (each API on the broker), `admin`
(DeleteRecords, DescribeConfigs, CreateTopics), `listener` (connections and limits).
"""
