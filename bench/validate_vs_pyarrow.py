"""Full validation of the same arrays: Ferry next to pyarrow.

Each array (about a million values of one type, some with nulls) is built by
pyarrow and imported into Ferry without copying, so both validate the same
bytes: ``ferry.validate(array, full=True)`` against pyarrow's
``array.validate(full=True)``. Times are medians of repeated runs, the two
taking turns; the ratio is Ferry's time over pyarrow's (below 1: Ferry is
faster).

    PYTHONPATH=python .venv/bin/python bench/validate_vs_pyarrow.py [--rows N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import pyarrow as pa

import ferry


def arrays(rows: int, rng: np.random.Generator) -> dict:
    valid = rng.random(rows) > 0.1
    ints = rng.integers(0, 1000, rows)
    words = np.array(["", "a", "ferry", "zero-copy", "größer", "a longer value here"])
    strings = words[rng.integers(0, len(words), rows)]
    lists = pa.ListArray.from_arrays(
        pa.array(np.arange(0, 4 * rows + 1, 4, dtype=np.int32)),
        pa.array(rng.integers(0, 100, 4 * rows, dtype=np.int32)))
    keys = pa.array(np.char.add("k", (np.arange(2 * rows) % 7).astype(str)))
    maps = pa.MapArray.from_arrays(pa.array(np.arange(0, 2 * rows + 1, 2, dtype=np.int32)),
                                   keys, pa.array(np.arange(2 * rows, dtype=np.int32)))
    type_ids = pa.array(rng.integers(0, 2, rows, dtype=np.int8))
    counts = [int((type_ids.to_numpy() == k).sum()) for k in range(2)]
    offsets = np.zeros(rows, dtype=np.int32)
    for k in range(2):
        mask = type_ids.to_numpy() == k
        offsets[mask] = np.arange(counts[k], dtype=np.int32)
    dense = pa.UnionArray.from_dense(type_ids, pa.array(offsets),
                                     [pa.array(np.arange(counts[0])),
                                      pa.array(np.arange(counts[1], dtype=np.float64))])
    return {
        "int64": pa.array(ints, mask=~valid),
        "decimal128(20, 2)": pa.array(ints.astype(object), pa.decimal128(20, 2)),
        "time64[us]": pa.array(ints * 86_000_000 // 1000, pa.time64("us"), mask=~valid),
        "date64": pa.array(ints * 86_400_000, pa.date64()),
        "utf8": pa.array(strings, pa.string(), mask=~valid),
        "utf8_view": pa.array(strings, pa.string_view()),
        "list<int32>": lists,
        "map<utf8, int32>": maps,
        "dense_union": dense,
        "dictionary<int32, utf8>": pa.array(strings).dictionary_encode(),
        "run_end_encoded<int32, int64>": pa.RunEndEncodedArray.from_arrays(
            pa.array(np.arange(4, 4 * rows + 1, 4, dtype=np.int32)),
            pa.array(np.arange(rows))),
    }


def median_seconds(run, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json")
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    results = []
    print(f"{'array':32} {'values':>9} {'ferry ms':>9} {'pyarrow ms':>11} {'ratio':>6}")
    for name, theirs in arrays(args.rows, rng).items():
        ours = ferry.import_arrow(theirs)
        ferry.validate(ours, full=True)
        theirs.validate(full=True)
        ferry_times, pyarrow_times = [], []
        for _ in range(3):  # turns, so drift hits both
            ferry_times.append(median_seconds(lambda: ferry.validate(ours, full=True),
                                              args.repeats))
            pyarrow_times.append(median_seconds(lambda: theirs.validate(full=True),
                                                args.repeats))
        ferry_ms = 1e3 * statistics.median(ferry_times)
        pyarrow_ms = 1e3 * statistics.median(pyarrow_times)
        results.append({"array": name, "values": len(theirs), "ferry_ms": ferry_ms,
                        "pyarrow_ms": pyarrow_ms, "ratio": ferry_ms / pyarrow_ms})
        print(f"{name:32} {len(theirs):9d} {ferry_ms:9.3f} {pyarrow_ms:11.3f} "
              f"{ferry_ms / pyarrow_ms:6.2f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"rows": args.rows, "results": results}, out, indent=2)


if __name__ == "__main__":
    main()
