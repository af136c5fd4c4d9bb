"""Sink of the sensor example: collects the clean readings and prints how
many arrived, their range of sequence numbers and the mean temperature.
Exits 1 if a reading out of range got through."""

import sys

from ferry.flow import Node

LOW, HIGH = -40.0, 85.0

seqs = []
temperatures = []
with Node() as node:
    for event in node:
        if event["type"] != "INPUT":
            continue
        batch = event["value"].to_pydict()
        seqs.extend(batch["seq"])
        temperatures.extend(batch["temperature"])

bad = [t for t in temperatures if not LOW <= t <= HIGH]
if bad or not temperatures:
    print(f"sink: FAILED: {len(temperatures)} readings, out of range: {bad[:5]}")
    sys.exit(1)
mean = sum(temperatures) / len(temperatures)
print(f"sink: {len(temperatures)} readings (seq {min(seqs)}..{max(seqs)}), "
      f"mean temperature {mean:.2f}, all within [{LOW:g}, {HIGH:g}]")
