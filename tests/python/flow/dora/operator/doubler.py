import pyarrow.compute as pc

from dora import DoraStatus


class Operator:
    def on_event(self, dora_event, send_output):
        if dora_event["type"] == "INPUT":
            send_output("doubled", pc.multiply(dora_event["value"], 2),
                        dora_event["metadata"])
        return DoraStatus.CONTINUE
