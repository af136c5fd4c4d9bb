"""Ferry: zero-copy hand-off of Apache Arrow data between runtimes.

Every object here speaks the Arrow PyCapsule protocol, so pyarrow, polars,
duckdb and nanoarrow read Ferry's data (and Ferry reads theirs) without
copying a buffer. ``ferry.telemetry()`` shows the counters that prove it.
"""

from ferry._ferry import (
    Array,
    ArrayStream,
    RecordBatch,
    Schema,
    devices,
    import_arrow,
    record_batch,
    reset_telemetry,
    sample_batch,
    stream_of,
    telemetry,
    telemetry_prometheus,
    to_device,
    validate,
    wide_batch,
)

__all__ = [
    "Array",
    "ArrayStream",
    "RecordBatch",
    "Schema",
    "devices",
    "import_arrow",
    "record_batch",
    "reset_telemetry",
    "sample_batch",
    "stream_of",
    "telemetry",
    "telemetry_prometheus",
    "to_device",
    "validate",
    "wide_batch",
]

__version__ = "0.1.0"
