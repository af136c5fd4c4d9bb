import asyncio
import time

from dora import Node

node = Node()
print(f"RESULT first try_recv {node.try_recv()} empty {node.is_empty()}", flush=True)
time.sleep(1.0)  # the producer sent 1, 2, 3 meanwhile
print(f"RESULT is_empty {node.is_empty()}", flush=True)
drained = node.drain()
print(f"RESULT drained {[e['value'].to_pylist() for e in drained if e['type'] == 'INPUT']}",
      flush=True)


async def main():
    event = await node.recv_async()
    print(f"RESULT async {event['type']} {event['value'].to_pylist()}", flush=True)


asyncio.run(main())
rest = [event["type"] for event in node]
print(f"RESULT rest ends with STOP {rest[-1:] == ['STOP']}", flush=True)
