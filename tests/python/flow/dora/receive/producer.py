import pyarrow as pa

from dora import Node

node = Node()
ticks = 0
for event in node:
    if event["type"] != "INPUT":
        continue
    ticks += 1
    if ticks == 4:  # 200 ms in: the consumer is waiting in try_recv's loop
        for number in (1, 2, 3):
            node.send_output("numbers", pa.array([number]))
    if ticks == 40:  # 2 s in: the consumer waits in recv_async
        node.send_output("numbers", pa.array([4]))
        break
