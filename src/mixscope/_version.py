"""The package version and the version of the files it writes: the one place to bump them.

``SCHEMA_VERSION`` is the version of every Parquet file a job writes (stored in each
file's metadata and in the run identity); ``store/schema.py`` says what changed in each.
"""

__version__ = "0.1.0"
SCHEMA_VERSION = 4
