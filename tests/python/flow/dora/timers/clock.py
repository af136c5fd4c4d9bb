import datetime

from dora import Node

node = Node()
ticks = 0
fast = 0
for event in node:
    if event["type"] != "INPUT":
        continue
    value = event["value"]
    stamp = event["metadata"]["timestamp"]
    if event["id"] == "fast":
        fast += 1
        continue
    ticks += 1
    if ticks == 1:
        print(f"RESULT tick value {value.type} {len(value)} kind {event['kind']}", flush=True)
        print(f"RESULT timestamp {type(stamp).__name__} utc {stamp.utcoffset()}", flush=True)
    if ticks == 5:
        break
# 5 ticks of 50 ms: the 100 Hz timer ticked meanwhile (dora-rs drops fast ticks of a busy node).
print(f"RESULT ticks {ticks} fast ticked {fast > 0}", flush=True)
