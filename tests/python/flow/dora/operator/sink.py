from dora import Node

node = Node()
for event in node:
    if event["type"] == "INPUT":
        print(f"RESULT {bytes(event['value'].to_pylist()).decode()}", flush=True)
    elif event["type"] == "STOP":
        break
