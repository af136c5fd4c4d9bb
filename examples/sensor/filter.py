"""Filter of the sensor example: passes on readings within the thermometer's
range (-40 .. 85 degrees) and drops the rest."""

import pyarrow.compute as pc
from ferry.flow import Node

LOW, HIGH = -40.0, 85.0

seen = kept = 0
with Node() as node:
    for event in node:
        if event["type"] != "INPUT":
            continue
        batch = event["value"]
        temperature = batch.column("temperature")
        in_range = pc.and_(pc.greater_equal(temperature, LOW), pc.less_equal(temperature, HIGH))
        clean = batch.filter(in_range)
        seen += batch.num_rows
        kept += clean.num_rows
        if clean.num_rows > 0:
            node.send_output("clean", clean)
print(f"filter: kept {kept} of {seen} readings, dropped {seen - kept} out of range")
