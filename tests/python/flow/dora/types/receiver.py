import datetime

from dora import Node

node = Node()
for event in node:
    if event["type"] == "INPUT":
        value = event["value"]
        metadata = dict(event["metadata"])
        stamp = metadata.pop("timestamp")
        assert isinstance(stamp, datetime.datetime), stamp
        print(f"RESULT {event['id']} {value.type} {value.to_pylist()} {sorted(metadata.items())}",
              flush=True)
    elif event["type"] == "INPUT_CLOSED":
        print(f"RESULT closed {event['id']}", flush=True)
    elif event["type"] == "STOP":
        print(f"RESULT stop", flush=True)
        break
print(f"RESULT end {node.next()}", flush=True)
