"""Combines one `make bench` run into markdown tables (medians, ns per column).

    python bench/report.py --cpp exchange_bench.json --python python.json --floor floor.txt \
        --instructions instructions.txt

Inputs: Google Benchmark JSON from ferry_exchange_bench (with median
aggregates), the JSON of bench/exchange_vs_pyarrow.py, the key=value lines
of the floor program and of the callgrind instruction counts. Any input may be missing; its tables are then left out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

# Coefficient of variation across repetitions, by the same keys as the medians.
SPREAD: dict = {}
NAME = re.compile(r"^(?P<kind>\w+)/(?P<path>\w+)/(?P<mix>\w+)/columns:(?P<columns>\d+)/rows:(?P<rows>\d+)$")


def load_cpp(path: str) -> tuple[dict, dict, dict]:
    """(round trips keyed by (path, mix, columns, rows) -> ns/column, floor name -> ns, context)."""
    with open(path) as handle:
        report = json.load(handle)
    round_trips, floors = {}, {}
    for entry in report["benchmarks"]:
        if entry.get("error_occurred"):
            continue
        if entry.get("aggregate_name") == "cv":
            match = NAME.match(entry["run_name"])
            if match:
                key = (match["path"], match["mix"], int(match["columns"]), int(match["rows"]))
                SPREAD[key] = entry["cpu_time"]
            continue
        if entry.get("aggregate_name") != "median":
            continue
        ns_per_column = entry["per_column"] * 1e9
        match = NAME.match(entry["run_name"])
        if match:
            key = (match["path"], match["mix"], int(match["columns"]), int(match["rows"]))
            round_trips[key] = ns_per_column
        elif entry["run_name"].startswith("floor/"):
            floors[entry["run_name"].removeprefix("floor/")] = ns_per_column
    return round_trips, floors, report.get("context", {})


def load_floor(path: str) -> dict:
    values = {}
    with open(path) as handle:
        for line in handle:
            key, _, value = line.strip().partition("=")
            if value:
                values[key] = float(value)
    return values


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def ratio(numerator, denominator) -> str:
    if numerator is None or denominator is None:
        return "–"
    return f"{numerator / denominator:.2f}"


def spread(key) -> str:
    return f"{SPREAD[key]:.0%}" if key in SPREAD else "–"


def ns(value) -> str:
    if value is None:
        return "–"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def cpp_tables(round_trips: dict) -> list[str]:
    out = []
    for mix, title in (("int64", "int64 columns"), ("mixed", "mixed columns (int64, utf8, float64, list<utf8>)")):
        shapes = sorted({(c, r) for (_, m, c, r) in round_trips if m == mix}, key=lambda s: (s[1], s[0]))
        if not shapes:
            continue
        interop = any(p == "ferry_to_arrow" for (p, m, _, _) in round_trips if m == mix)
        header = ["columns", "rows", "Ferry ns/col", "Arrow C++ ns/col", "Ferry / Arrow", "CV Ferry / Arrow"]
        if interop:
            header += ["Ferry→Arrow ns/col", "Arrow→Ferry ns/col"]
        rows = []
        for columns, num_rows in shapes:
            ferry = round_trips.get(("ferry", mix, columns, num_rows))
            arrow = round_trips.get(("arrow", mix, columns, num_rows))
            row = [str(columns), str(num_rows), ns(ferry), ns(arrow), ratio(ferry, arrow),
                   spread(("ferry", mix, columns, num_rows)) + " / " + spread(("arrow", mix, columns, num_rows))]
            if interop:
                row += [ns(round_trips.get(("ferry_to_arrow", mix, columns, num_rows))),
                        ns(round_trips.get(("arrow_to_ferry", mix, columns, num_rows)))]
            rows.append(row)
        out.append(f"### C++: export + import, {title}\n\n" + table(header, rows))
    return out


def python_table(path: str) -> str:
    with open(path) as handle:
        report = json.load(handle)
    results = report["results"]
    paths = list(dict.fromkeys(r["path"] for r in results))
    by_key = {(r["path"], r["columns"], r["rows"]): r["ns_per_column"] for r in results}
    shapes = sorted({(r["columns"], r["rows"]) for r in results}, key=lambda s: (s[1], s[0]))
    header = ["columns", "rows"] + [f"{p} ns/col" for p in paths] + ["ferry/pyarrow"]
    rows = []
    for columns, num_rows in shapes:
        row = [str(columns), str(num_rows)] + [ns(by_key.get((p, columns, num_rows))) for p in paths]
        row.append(ratio(by_key.get(("ferry -> ferry", columns, num_rows)),
                         by_key.get(("pyarrow -> pyarrow", columns, num_rows))))
        rows.append(row)
    title = f"### Python (pyarrow {report['pyarrow']}, Python {report['python']}): one call = export + import"
    return title + "\n\n" + table(header, rows)


def floor_table(floors: dict, floor: dict, round_trips: dict) -> str:
    lines = ["### Floor"]
    rows = []
    for name, value in floor.items():
        rows.append([f"floor.c {name}", f"{value:g}"])
    for name, value in floors.items():
        rows.append([f"per column: {name} (ns)", ns(value)])
    if rows:
        lines.append("\n" + table(["measure", "value"], rows))
    # Ferry against the least work one column's round trip could cost.
    ferry_wide = round_trips.get(("ferry", "int64", 1000, 65536))
    arrow_wide = round_trips.get(("arrow", "int64", 1000, 65536))
    if ferry_wide and floors:
        least = sum(floors.values())
        lines.append(
            f"\nPer-column floor (descriptor copy + malloc/free + refcount pin) = {ns(least)} ns; "
            f"Ferry at 1000 int64 columns x 65536 rows: {ns(ferry_wide)} ns/col = "
            f"{ferry_wide / least:.1f}x the floor"
            + (f"; Arrow C++: {ns(arrow_wide)} ns/col = {arrow_wide / least:.1f}x." if arrow_wide else "."))
    if ferry_wide and "memcpy_gbps" in floor:
        copy_ns = 65536 * 8 / floor["memcpy_gbps"]  # bytes / (bytes per ns)
        lines.append(
            f"\nCopying one 65536-row int64 column (512 KiB) at memcpy_gbps={floor['memcpy_gbps']:g} "
            f"would take {copy_ns:,.0f} ns; Ferry's zero-copy round trip of that column takes "
            f"{ns(ferry_wide)} ns ({copy_ns / ferry_wide:,.0f}x less).")
    return "\n".join(lines)


ALLOCATORS = {"malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc"}


def allocations(callgrind_out: str) -> int:
    """Calls into the C allocator recorded in a callgrind output file."""
    names, total, callee = {}, 0, None
    with open(callgrind_out) as handle:
        for line in handle:
            match = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line)
            if match:
                if match[3]:
                    names[match[2]] = match[3].strip()
                callee = match[2] if match[1] == "cfn" else None
                continue
            if callee is not None and line.startswith("calls="):
                if names.get(callee) in ALLOCATORS:
                    total += int(line.split()[0].removeprefix("calls="))
                callee = None
    return total


def instructions_table(path: str) -> str:
    values = load_floor(path)
    iterations = values.pop("iterations", 1)
    counts, mallocs = {}, {}
    for key, value in values.items():
        match = NAME.match(key)
        if not match:
            continue
        shape = (match["path"], match["mix"], int(match["columns"]), int(match["rows"]))
        counts[shape] = value
        stem = key.removeprefix("roundtrip/").replace("/", "_").replace(":", "_")
        out = os.path.join(os.path.dirname(path), f"callgrind.{stem}.out")
        if os.path.exists(out):
            mallocs[shape] = allocations(out) / iterations
    shapes = list(dict.fromkeys((m, c, r) for (_, m, c, r) in counts))
    rows = []
    for mix, columns, num_rows in shapes:
        ferry, arrow = ("ferry", mix, columns, num_rows), ("arrow", mix, columns, num_rows)
        per_column = lambda value, digits=0: "–" if value is None else f"{value / columns:,.{digits}f}"
        rows.append([mix, str(columns), str(num_rows), per_column(counts.get(ferry)),
                     per_column(counts.get(arrow)), ratio(counts.get(ferry), counts.get(arrow)),
                     per_column(mallocs.get(ferry), 1), per_column(mallocs.get(arrow), 1)])
    header = ["columns of", "columns", "rows", "Ferry instr/col", "Arrow C++ instr/col",
              "Ferry / Arrow", "Ferry mallocs/col", "Arrow C++ mallocs/col"]
    return ("### C++: instructions and allocations per column, one export + import (callgrind)\n\n"
            + table(header, rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpp")
    parser.add_argument("--python")
    parser.add_argument("--floor")
    parser.add_argument("--instructions")
    args = parser.parse_args()

    sections = []
    round_trips, floors, context = {}, {}, {}
    if args.cpp and os.path.exists(args.cpp):
        round_trips, floors, context = load_cpp(args.cpp)
        sections += cpp_tables(round_trips)
    if args.instructions and os.path.exists(args.instructions):
        sections.append(instructions_table(args.instructions))
    if args.python and os.path.exists(args.python):
        sections.append(python_table(args.python))
    floor = load_floor(args.floor) if args.floor and os.path.exists(args.floor) else {}
    if floors or floor:
        sections.append(floor_table(floors, floor, round_trips))
    if context:
        sections.append(
            f"C++ figures: median of {context.get('repetitions', '?')} repetitions, CPU time; "
            f"Arrow C++ {context.get('arrow_cpp', '?')}; {context.get('num_cpus', '?')} CPUs at "
            f"{context.get('mhz_per_cpu', '?')} MHz; Ferry built {context.get('ferry_build', '?')}; "
            f"load average at the start: {' '.join(f'{v:.2f}' for v in context.get('load_avg', []))}.")
    print("\n\n".join(sections))
    return 0


if __name__ == "__main__":
    sys.exit(main())
