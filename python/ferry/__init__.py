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
    _devices,
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


class DeviceList(list):
    """The devices Ferry sees: a list of dicts with ``type`` ("cpu", "cuda",
    "opencl", ...), ``id`` (-1 for an absent type), ``name``, ``present`` and
    ``reason`` (why a type is absent). Printed, it reads as one line per type."""

    def present(self, device_type=None):
        """The present devices, of one type if given."""
        return [d for d in self if d["present"] and device_type in (None, d["type"])]

    def __str__(self):
        lines, by_type = [], {}
        for device in self:
            by_type.setdefault(device["type"], []).append(device)
        for device_type, entries in by_type.items():
            if entries[0]["present"]:
                text = ", ".join(f'{d["name"]} (id {d["id"]})' for d in entries)
            else:
                text = f'absent ({entries[0]["reason"]})'
            lines.append(f"{device_type}: {text}")
        return "\n".join(lines)

    def __repr__(self):
        return str(self)


def devices():
    """Every Arrow device type Ferry knows: the devices present, and for each
    type without one, why (a DeviceList: a list of dicts that prints as a
    table)."""
    return DeviceList(_devices())
