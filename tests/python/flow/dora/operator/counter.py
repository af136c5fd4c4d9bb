from dora import DoraStatus


class Operator:
    def __init__(self):
        self.seen = 0

    def on_event(self, dora_event, send_output):
        if dora_event["type"] == "INPUT":
            self.seen += 1
            values = dora_event["value"].to_pylist()
            send_output("count", f"{self.seen}: {values}".encode())
        return DoraStatus.CONTINUE
