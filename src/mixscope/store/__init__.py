"""The results format: the Arrow schema (and, later, Parquet shards and the manifest)."""
