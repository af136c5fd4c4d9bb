"""Export + import of a record batch from Python: Ferry next to pyarrow.

Every path hands a record batch through the Arrow PyCapsule protocol
(``__arrow_c_array__``: one ArrowSchema and one ArrowArray) and imports it on
the other side; the imported batch is dropped inside the timed statement, so
its release callback is part of the cost, as it is for users.

    pyarrow -> pyarrow   pa.record_batch(holder of a pyarrow batch)
    ferry -> ferry       ferry.record_batch(holder of a ferry batch)
    pyarrow -> ferry     ferry.record_batch(holder of a pyarrow batch)
    ferry -> pyarrow     pa.record_batch(holder of a ferry batch)
    ferry C++ loop       ferry._ferry._bench_roundtrip: export + import in C++,
                         no Python per round trip

A "holder" is a tiny object that only forwards ``__arrow_c_array__``, so every
path goes through the capsule protocol (not a same-library shortcut) and pays
the same Python call. Times are medians of repeated timeit runs; the paths
take turns run by run.

    PYTHONPATH=python .venv/bin/python bench/exchange_vs_pyarrow.py [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import timeit

import numpy as np
import pyarrow as pa

import ferry
from ferry import _ferry


class CArrayHolder:
    """Exposes only ``__arrow_c_array__`` of the wrapped batch."""

    __slots__ = ("_source",)

    def __init__(self, source):
        self._source = source

    def __arrow_c_array__(self, requested_schema=None):
        return self._source.__arrow_c_array__(requested_schema)


def pyarrow_wide_batch(num_columns: int, num_rows: int) -> pa.RecordBatch:
    """The same schema and values as ferry.wide_batch, built by pyarrow."""
    arrays = [
        pa.array(np.arange(c * num_rows, (c + 1) * num_rows, dtype=np.int64))
        for c in range(num_columns)
    ]
    schema = pa.schema([pa.field(f"c{c}", pa.int64(), nullable=False) for c in range(num_columns)])
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class Measurement:
    """One path at one shape: a timeit statement sized to run about `target_s`."""

    def __init__(self, run_once, target_s: float):
        self._run = run_once  # run_once(number) -> seconds for `number` calls
        self._run(1)  # warm caches and lazy imports
        once = max(self._run(1), 1e-7)
        self._number = max(1, int(target_s / once))
        self.samples: list[float] = []

    def sample(self) -> None:
        self.samples.append(self._run(self._number) / self._number)

    def median(self) -> float:
        return statistics.median(self.samples)


def timeit_runner(statement: str, namespace: dict):
    timer = timeit.Timer(statement, globals=namespace)
    return timer.timeit


def cpp_loop_runner(batch):
    def run(number: int) -> float:
        start = time.perf_counter()
        _ferry._bench_roundtrip(batch, number)
        return time.perf_counter() - start

    return run


PATHS = {
    "pyarrow -> pyarrow": "pa.record_batch(pyarrow_holder)",
    "ferry -> ferry": "ferry.record_batch(ferry_holder)",
    "pyarrow -> ferry": "ferry.record_batch(pyarrow_holder)",
    "ferry -> pyarrow": "pa.record_batch(ferry_holder)",
}


def check_same_data(pyarrow_batch: pa.RecordBatch, ferry_batch) -> None:
    """A fast wrong answer must not enter the table."""
    through_ferry = pa.record_batch(CArrayHolder(ferry.record_batch(CArrayHolder(pyarrow_batch))))
    if not through_ferry.equals(pyarrow_batch):
        raise SystemExit("pyarrow -> ferry -> pyarrow changed the batch")
    if not pa.record_batch(CArrayHolder(ferry_batch)).equals(pyarrow_batch):
        raise SystemExit("ferry.wide_batch and the pyarrow batch differ")


def measure(columns: list[int], rows: list[int], repeat: int, target_s: float) -> list[dict]:
    results = []
    for num_rows in rows:
        for num_columns in columns:
            pyarrow_batch = pyarrow_wide_batch(num_columns, num_rows)
            ferry_batch = ferry.wide_batch(num_columns, num_rows)
            check_same_data(pyarrow_batch, ferry_batch)
            namespace = {
                "pa": pa,
                "ferry": ferry,
                "pyarrow_holder": CArrayHolder(pyarrow_batch),
                "ferry_holder": CArrayHolder(ferry_batch),
            }
            measurements = {
                path: Measurement(timeit_runner(statement, namespace), target_s)
                for path, statement in PATHS.items()
            }
            measurements["ferry C++ loop"] = Measurement(cpp_loop_runner(ferry_batch), target_s)
            # Paths take turns, so a burst of load on the machine hits them alike.
            for _ in range(repeat):
                for measurement in measurements.values():
                    measurement.sample()
            timings = {path: measurement.median() for path, measurement in measurements.items()}
            for path, seconds in timings.items():
                results.append({
                    "path": path,
                    "columns": num_columns,
                    "rows": num_rows,
                    "ns_per_round_trip": seconds * 1e9,
                    "ns_per_column": seconds * 1e9 / num_columns,
                })
            del pyarrow_batch, ferry_batch, namespace, measurements
    return results


def markdown(results: list[dict]) -> str:
    paths = list(dict.fromkeys(r["path"] for r in results))
    by_key = {(r["path"], r["columns"], r["rows"]): r["ns_per_column"] for r in results}
    shapes = list(dict.fromkeys((r["columns"], r["rows"]) for r in results))
    header = ["columns", "rows"] + [f"{p} ns/col" for p in paths] + ["ferry/pyarrow"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for columns, rows in shapes:
        cells = [str(columns), str(rows)]
        cells += [f"{by_key[(p, columns, rows)]:.0f}" for p in paths]
        ratio = by_key[("ferry -> ferry", columns, rows)] / by_key[("pyarrow -> pyarrow", columns, rows)]
        cells.append(f"{ratio:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, nargs="+", default=[1, 10, 100, 1000])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 65536])
    parser.add_argument("--repeat", type=int, default=7, help="timeit runs per figure (median)")
    parser.add_argument("--target-seconds", type=float, default=0.02, help="length of one timeit run")
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args()

    results = measure(args.columns, args.rows, args.repeat, args.target_seconds)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({
                "python": sys.version.split()[0],
                "pyarrow": pa.__version__,
                "ferry": ferry.__version__,
                "repeat": args.repeat,
                "results": results,
            }, out, indent=1)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
