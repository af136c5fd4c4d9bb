"""A subscriber process for test_flow.py: receives `count` messages from a
channel and prints one JSON line per message (or per error), then exits."""

import json
import sys

import pyarrow as pa

import ferry
from ferry.flow import Subscriber


def region_of(address):
    """The mapping (path, offset) and permissions of `address` in this process,
    from the /proc/self/maps line whose range holds it (test_node.py uses it too)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                path = fields[5].strip() if len(fields) > 5 else ""
                return {"path": path, "perms": fields[1],
                        "offset": int(fields[2], 16) + address - start}
    return None


def main():
    name, count = sys.argv[1], int(sys.argv[2])
    timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    subscriber = Subscriber(name, connect_timeout=10.0)
    print(json.dumps({"connected": True}), flush=True)
    for _ in range(count):
        try:
            message = subscriber.receive(timeout)
        except EOFError as error:
            print(json.dumps({"eof": str(error)}), flush=True)
            return
        except TimeoutError as error:
            print(json.dumps({"timeout": str(error)}), flush=True)
            return
        batch = pa.record_batch(message.batch)
        first = message.batch.column(0).buffers()
        address = next(b[0] for b in first[1:] if b is not None)
        print(json.dumps({
            "sequence": message.sequence,
            "metadata": message.metadata,
            "columns": batch.column_names,
            "values": batch.column(0).to_pylist()[:8],
            "rows": batch.num_rows,
            "region": region_of(address),
            "copied": sum(v for k, v in ferry.telemetry().items() if k.startswith("bytes_copied")),
        }), flush=True)


if __name__ == "__main__":
    main()
