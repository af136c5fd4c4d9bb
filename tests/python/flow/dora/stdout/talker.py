import time

from dora import Node

node = Node()
time.sleep(0.3)
print("first line", flush=True)
time.sleep(0.2)
print("second line", flush=True)
# dora-rs may drop the last lines of a node that exits at once: give it time.
time.sleep(0.5)
