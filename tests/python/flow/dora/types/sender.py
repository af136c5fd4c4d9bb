import time

import pyarrow as pa

from dora import Node

node = Node()
event = node.next()
assert event["type"] == "INPUT" and event["id"] == "tick", event
metadata = {"count": 3, "ratio": 0.5, "name": "frame", "ok": True, "box": [1, 2, 3]}
node.send_output("out", b"abc", metadata)
node.send_output("out", pa.array([1, 2, 3], type=pa.int32()))
node.send_output("out", pa.array(["a", None, "c"]))
node.send_output("out", pa.array([1.5, 2.5]))
node.send_output("out", pa.array([[1], [2, 3]]))
try:
    node.send_output("out", {"not": "arrow"})
except Exception as error:  # dora-rs and Ferry both refuse a dict
    print(f"RESULT dict refused {type(error).__name__ in ('TypeError', 'RuntimeError')}", flush=True)
# dora-rs may drop what a node sent just before it exits: give it time.
time.sleep(0.5)
