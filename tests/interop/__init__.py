"""Support for the tests in which clients nobody here wrote, on the JVM, judge the Kafka
listener: their jars (`jars`) and what they are told to reach a cluster (`java`)."""
