from dora import Node

node = Node()
for event in node:
    if event["type"] == "INPUT":
        print(f"RESULT got {event['value'].type} {event['value'].to_pylist()}", flush=True)
    elif event["type"] == "STOP":
        break
