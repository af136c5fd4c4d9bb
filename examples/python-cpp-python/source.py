"""Source of the python-cpp-python example: sends record batches of
temperature readings (id, celsius) to the C++ transform node.

The columns are built directly in the output's shared memory (`node.loan`,
filled through numpy), so sending copies nothing: the summary shows 0 bytes
copied on the source -> transform edge.
"""

import numpy as np
from ferry.flow import Node

BATCHES = 10
ROWS = 100

with Node() as node:
    for batch_index in range(BATCHES):
        ids = node.loan("readings", ROWS, "int64")
        celsius = node.loan("readings", ROWS, "float64")
        id_values = np.asarray(ids)
        id_values[:] = np.arange(batch_index * ROWS, (batch_index + 1) * ROWS, dtype=np.int64)
        # -20.0 .. 29.9 degrees; the sink recomputes the same double
        # expression as the C++ node, so it compares exactly.
        np.asarray(celsius)[:] = (id_values % 500) / 10.0 - 20.0
        node.send_loans("readings", {"id": ids, "celsius": celsius}, {"batch": batch_index})
    print(f"source: sent {BATCHES} batches of {ROWS} rows")
