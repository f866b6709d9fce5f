"""The Spark side of epochlog: a Structured Streaming data source and the consuming job."""
