"""Sink of the python-cpp-python example: checks that every row's
fahrenheit (computed by the C++ node) is celsius * 9 / 5 + 32 and
prints the result. Exits 1 if a value is wrong or rows are missing."""

import sys

from ferry.flow import Node

EXPECTED_ROWS = 1000

rows = 0
batches = 0
wrong = []
with Node() as node:
    for event in node:
        if event["type"] != "INPUT":
            continue
        batch = event["value"]  # a pyarrow.RecordBatch over the transform's shared memory
        table = batch.to_pydict()
        for row_id, celsius, fahrenheit in zip(table["id"], table["celsius"], table["fahrenheit"]):
            if abs(fahrenheit - (celsius * 9.0 / 5.0 + 32.0)) > 1e-9:
                wrong.append((row_id, celsius, fahrenheit))
        rows += batch.num_rows
        batches += 1

if wrong or rows != EXPECTED_ROWS:
    print(f"sink: FAILED: {rows} rows (expected {EXPECTED_ROWS}), wrong values: {wrong[:5]}")
    sys.exit(1)
print(f"sink: {rows} rows in {batches} batches, every fahrenheit value correct")
