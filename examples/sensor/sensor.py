"""Sensor of the sensor example: on every tick of its timer input it reads a
simulated thermometer and sends one reading (sensor, seq, temperature).
Every seventh reading, from the third on, is a glitch (999 degrees) that the
filter removes. It stops after READINGS readings."""

import math

import pyarrow as pa
from ferry.flow import Node

READINGS = 50
GLITCH = 999.0


def temperature(seq):
    if seq % 7 == 3:
        return GLITCH
    return round(21.0 + 4.0 * math.sin(seq / 5.0), 3)


seq = 0
with Node() as node:
    for event in node:
        if event["type"] != "INPUT" or event["id"] != "tick":
            continue
        seq += 1
        reading = pa.record_batch(
            {
                "sensor": pa.array(["thermo-1"]),
                "seq": pa.array([seq], pa.int64()),
                "temperature": pa.array([temperature(seq)], pa.float64()),
            }
        )
        node.send_output("reading", reading)
        if seq == READINGS:
            break
print(f"sensor: sent {seq} readings")
