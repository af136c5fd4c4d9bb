"""dora-rs's Python node API (``from dora import Node``) on Ferry's node API.

``ferry run`` puts the directory above this package first on the PYTHONPATH
of Python nodes and Python runtimes, so a node written for dora-rs runs on
Ferry unchanged, even where the dora-rs package is installed too (outside
``ferry run`` the real one is imported as before). See docs/dora.md for what
is supported; ``ferry.flow.Node`` stays Ferry's own API.

Events are dicts with ``type`` ("INPUT", "INPUT_CLOSED", "STOP", "ERROR"),
``id``, ``kind`` ("dora") and, for inputs, ``value`` (a pyarrow array that
points into the sender's shared memory: nothing is copied) and ``metadata``
(a dict; ``timestamp`` is a UTC ``datetime``).
"""

import asyncio
import collections
import datetime
import enum
import os

import pyarrow as pa

from ferry import flow as _flow

__all__ = ["DoraStatus", "Node"]

# The metadata key dora-rs fills with the send time (a datetime on receipt).
_TIMESTAMP = "timestamp"


class DoraStatus(enum.Enum):
    """What an operator's ``on_event`` returns."""

    CONTINUE = 0
    STOP = 1
    STOP_ALL = 2


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def _outgoing_metadata(metadata):
    """Ferry metadata from dora metadata: the send time goes in ``timestamp``
    (ISO text on the wire); other datetimes travel as ISO text too."""
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError(f"metadata must be a dict, not {type(metadata).__name__}")
    out = {}
    for key, value in (metadata or {}).items():
        if key == _TIMESTAMP:
            continue  # dora-rs sets it at each send; so does the shim
        out[key] = value.isoformat() if isinstance(value, datetime.datetime) else value
    out[_TIMESTAMP] = _now().isoformat()
    return out


def _incoming_metadata(metadata):
    stamp = metadata.get(_TIMESTAMP)
    when = None
    if isinstance(stamp, str):
        try:
            when = datetime.datetime.fromisoformat(stamp)
        except ValueError:
            when = None
    # A Ferry node or a timer sent it: the time it was received stands in.
    metadata[_TIMESTAMP] = when if when is not None else _now()
    return metadata


def _as_arrow(data):
    """The array dora-rs would send for ``data``: bytes become uint8, arrow
    arrays go as they are; lists and tuples go through ``pyarrow.array``."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        buffer = pa.py_buffer(data)
        return pa.Array.from_buffers(pa.uint8(), buffer.size, [None, buffer])
    if isinstance(data, (list, tuple)):
        return pa.array(data)
    if hasattr(data, "__arrow_c_array__") or hasattr(data, "__arrow_c_stream__"):
        return data
    raise TypeError(
        f"send_output: data of type {type(data).__name__} cannot be sent: give bytes, a list, "
        "or an Arrow array (pyarrow, polars, anything with __arrow_c_array__)"
    )


def _dora_value(value):
    """Ferry hands record batches as they are; dora-rs always gives an array."""
    if isinstance(value, pa.RecordBatch):
        return pa.StructArray.from_arrays(value.columns, fields=list(value.schema))
    return value


class SampleHandler:
    """A writable buffer in the output's shared memory (``send_output_raw``):
    fill it through the buffer protocol, then ``send()`` (or leave the
    ``with`` block). Nothing is copied."""

    def __init__(self, node, output_id, loan, metadata):
        self._node = node
        self._output_id = output_id
        self._loan = loan
        self._metadata = metadata
        self._sent = False

    def __buffer__(self, flags):
        return memoryview(self._loan)

    def as_memoryview(self):
        return memoryview(self._loan)

    def send(self):
        if self._sent:
            raise RuntimeError("this sample was already sent")
        self._sent = True
        self._node.send_output(self._output_id, self._loan, _outgoing_metadata(self._metadata))

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None and not self._sent:
            self.send()
        return False


class Node:
    """A dora-rs node running on Ferry (``ferry run`` starts it)."""

    def __init__(self, node_id=None):
        self._node = _flow.Node(node_id)
        self._pending = collections.deque()
        self._ended = False
        self._stop_seen = False

    # ---- receiving

    def _event(self, event):
        if event is None:
            if self._ended:
                return None
            self._ended = True
            if self._stop_seen:
                return None
            # Ferry ends the stream when every input is closed; dora-rs says STOP first.
            self._stop_seen = True
            return {"type": "STOP", "id": "ALL_INPUTS_CLOSED", "kind": "dora"}
        event["kind"] = "dora"
        kind = event["type"]
        if kind == "INPUT":
            event["value"] = _dora_value(event["value"])
            event["metadata"] = _incoming_metadata(event.get("metadata") or {})
        elif kind == "STOP":
            self._stop_seen = True
        return event

    def _receive(self, timeout):
        """The next event; raises TimeoutError after ``timeout`` seconds."""
        if self._pending:
            return self._pending.popleft()
        if self._ended:
            return None
        while True:
            event = self._event(self._node.next(timeout=timeout))
            if event is not None or self._ended:
                return event

    def next(self, timeout=None):
        """The next event, waiting for it; None once the stream has ended. After
        ``timeout`` seconds without one, an ERROR event says so."""
        try:
            return self._receive(timeout)
        except TimeoutError:
            return {
                "type": "ERROR",
                "error": f"timeout: no event within {timeout} s",
                "kind": "dora",
            }

    def __iter__(self):
        return self

    def __next__(self):
        event = self._receive(None)
        if event is None:
            raise StopIteration
        return event

    def try_recv(self):
        """The next event if one is waiting, else None (never waits)."""
        try:
            return self._receive(0)
        except TimeoutError:
            return None

    def is_empty(self):
        """True when no event is waiting."""
        if self._pending:
            return False
        event = self.try_recv()
        if event is None:
            return True
        self._pending.append(event)
        return False

    def drain(self):
        """Every event waiting now, as a list (never waits)."""
        events = []
        while True:
            event = self.try_recv()
            if event is None:
                return events
            events.append(event)

    async def recv_async(self, timeout=None):
        """The next event without blocking the asyncio loop (a worker thread
        waits); None at the end of the stream or after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()

        def wait():
            try:
                return self._receive(timeout)
            except TimeoutError:
                return None

        return await loop.run_in_executor(None, wait)

    # ---- sending

    def send_output(self, output_id, data, metadata=None):
        """Sends ``data`` (bytes, a list, or an Arrow array) on ``output_id``.
        Arrays lent by the output travel as they are; anything else is copied
        into shared memory once (counted in ``ferry.telemetry()``)."""
        self._node.send_output(output_id, _as_arrow(data), _outgoing_metadata(metadata))

    def send_output_raw(self, output_id, data_length, metadata=None):
        """A SampleHandler over ``data_length`` bytes of the output's shared
        memory: write into it, then ``send()`` it. Zero copy."""
        loan = self._node.loan(output_id, int(data_length), "uint8")
        return SampleHandler(self._node, output_id, loan, metadata)

    # ---- information

    def dataflow_id(self):
        return os.environ.get("FERRY_DATAFLOW", "")

    def dataflow_descriptor(self):
        """The descriptor ``ferry run`` was given, parsed (needs PyYAML)."""
        import yaml

        path = os.environ.get("FERRY_DESCRIPTOR")
        if not path:
            raise RuntimeError("FERRY_DESCRIPTOR is not set: start the node with `ferry run`")
        with open(path, encoding="utf-8") as file:
            return yaml.safe_load(file)

    def node_config(self):
        """This node's entry of the descriptor."""
        for node in self.dataflow_descriptor().get("nodes", []):
            if node.get("id") == self._node.id:
                return node
        return {}

    def close(self):
        self._node.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"dora.Node({self._node.id!r}) on Ferry"
