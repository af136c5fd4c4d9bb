import time

import pyarrow as pa

from dora import Node

node = Node()
sent = 0
for event in node:
    if event["type"] == "INPUT":
        sent += 1
        node.send_output("numbers", pa.array([sent, sent * 10]))
        if sent == 3:
            break
time.sleep(0.5)  # dora-rs may drop what a node sent just before it exits
