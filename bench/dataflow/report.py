"""Markdown tables of one dataflow benchmark run (bench/dataflow/run.sh):
node→node and operator→operator one-way latency of Ferry, next to the raw
transport, dora-rs and this machine's floor, with the ratios of its goals.

    python bench/dataflow/report.py --results a.json b.json ... [--floor floor.txt]
        [--machine machine.txt] [--missing "name=reason"] ...

Every results file is a JSON list of records with system, language, mode,
size, samples, p50_us, p99_us, p999_us and optionally kind ("node",
"operator"; the raw transport's and dora_bench.py's records have none).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "transport"))
import common  # noqa: E402

RAW = ("ferry", "c++", "transport", "futex")
NODE_SERIES = [
    ("raw transport C++", RAW),
    ("Ferry C++ loan", ("ferry", "c++", "node", "loan")),
    ("Ferry C++ copy", ("ferry", "c++", "node", "copy")),
    ("Ferry C++ loan, no daemon", ("ferry", "c++", "node", "loan (no daemon)")),
    ("Ferry Python loan", ("ferry", "python", "node", "loan")),
    ("Ferry Python copy", ("ferry", "python", "node", "copy")),
    ("dora-rs Python", ("dora-rs", "python", "node", "blocking")),
]
OPERATOR_SERIES = [
    ("Ferry C++ (one runtime)", ("ferry", "c++", "operator", "in-process")),
    ("Ferry Python (one runtime)", ("ferry", "python", "operator", "in-process")),
    ("dora-rs Python (two runtimes)", ("dora-rs", "python", "operator", "runtime")),
]


def kind_of(record: dict) -> str:
    if "kind" in record:
        return record["kind"]
    return "node" if record["system"] == "dora-rs" else "transport"


def load(paths: list[str]) -> dict:
    """(system, language, kind, mode, size) -> record."""
    return common.load_records(paths, lambda record: (
        record["system"], record["language"], kind_of(record), record["mode"], record["size"]))


def us(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if value < 10:
        return f"{value:.2f}"
    if value < 1000:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def ratio(numerator: float | None, denominator: float | None) -> str:
    if not numerator or not denominator:
        return "–"
    value = numerator / denominator
    return f"{value:.1f}×" if value >= 10 else f"{value:.2f}×"


def p50(records: dict, key: tuple, size: int) -> float | None:
    record = records.get(key + (size,))
    return record["p50_us"] if record else None


def present(records: dict, series: list) -> list:
    return [(title, key) for title, key in series
            if any(k[:4] == key for k in records)]


def sizes_of(records: dict) -> list[int]:
    return sorted({key[4] for key in records})


def tail_table(records: dict, columns: list, sizes: list[int]) -> list[str]:
    lines = ["| size | " + " | ".join(title for title, _ in columns) + " |",
             "|---:|" + "---:|" * len(columns)]
    for size in sizes:
        cells = []
        for _, key in columns:
            record = records.get(key + (size,))
            cells.append(f"{us(record['p99_us'])} / {us(record['p999_us'])}" if record else "–")
        lines.append(f"| {common.size_label(size)} | " + " | ".join(cells) + " |")
    return lines


def node_section(records: dict, floor: dict) -> list[str]:
    columns = present(records, NODE_SERIES)
    if not columns:
        return []
    sizes = sizes_of({k: v for k, v in records.items() if k[2] in ("node", "transport")})
    futex = floor.get("futex_oneway_p50_us")
    gbps = floor.get("memcpy_gbps")
    has = {key for _, key in columns}
    extra = []
    if ("ferry", "c++", "node", "loan") in has and RAW in has:
        extra.append(("C++ loan / raw", ("ferry", "c++", "node", "loan"), RAW))
    if ("ferry", "python", "node", "loan") in has and RAW in has:
        extra.append(("Py loan / raw", ("ferry", "python", "node", "loan"), RAW))
    dora = ("dora-rs", "python", "node", "blocking")
    if dora in has:
        for title, key in [("dora / Py loan", ("ferry", "python", "node", "loan")),
                           ("dora / Py copy", ("ferry", "python", "node", "copy"))]:
            if key in has:
                extra.append((title, dora, key))
    floor_columns = []
    if futex:
        floor_columns.append("floor: futex")
        if ("ferry", "c++", "node", "loan") in has:
            floor_columns.append("C++ loan / floor")
        if gbps:
            floor_columns.append("floor: futex + 1 copy")
    lines = [
        "### Node → node (two processes, `ferry run`), one-way p50 in µs",
        "",
        "| size | " + " | ".join(t for t, _ in columns) + " | "
        + " | ".join(t for t, _, _ in extra + []) + (" | " if extra else "")
        + " | ".join(floor_columns) + " |",
        "|---:|" + "---:|" * (len(columns) + len(extra) + len(floor_columns)),
    ]
    for size in sizes:
        cells = [us(p50(records, key, size)) for _, key in columns]
        cells += [ratio(p50(records, a, size), p50(records, b, size)) for _, a, b in extra]
        if futex:
            cells.append(us(futex))
            if ("ferry", "c++", "node", "loan") in has:
                cells.append(ratio(p50(records, ("ferry", "c++", "node", "loan"), size), futex))
            if gbps:
                cells.append(us(futex + size / (gbps * 1e3)))
        lines.append(f"| {common.size_label(size)} | " + " | ".join(cells) + " |")
    lines += ["", "Tails, p99 / p99.9 in µs:", ""] + tail_table(records, columns, sizes)
    return lines


def operator_section(records: dict) -> list[str]:
    columns = present(records, OPERATOR_SERIES)
    if not columns:
        return []
    sizes = sizes_of({k: v for k, v in records.items() if k[2] == "operator"})
    has = {key for _, key in columns}
    dora = OPERATOR_SERIES[2][1]
    extra = [(f"dora / {title.split(' (')[0].replace('Ferry ', '')}", dora, key)
             for title, key in OPERATOR_SERIES[:2] if key in has and dora in has]
    lines = [
        "### Operator → operator, one-way p50 in µs",
        "",
        "| size | " + " | ".join(t for t, _ in columns)
        + "".join(f" | {t}" for t, _, _ in extra) + " |",
        "|---:|" + "---:|" * (len(columns) + len(extra)),
    ]
    for size in sizes:
        cells = [us(p50(records, key, size)) for _, key in columns]
        cells += [ratio(p50(records, a, size), p50(records, b, size)) for _, a, b in extra]
        lines.append(f"| {common.size_label(size)} | " + " | ".join(cells) + " |")
    lines += ["", "Tails, p99 / p99.9 in µs:", ""] + tail_table(records, columns, sizes)
    return lines


def goals(records: dict) -> list[str]:
    """The issue's goals, checked against the p50 figures of this run."""
    out = []
    sizes = sizes_of(records)

    def values(key):
        return {size: p50(records, key, size) for size in sizes if p50(records, key, size)}

    cpp_op = values(("ferry", "c++", "operator", "in-process"))
    if cpp_op:
        worst = max(cpp_op.values())
        out.append(f"- operator→operator (C++) sub-microsecond: "
                   f"{'met' if worst < 1 else 'missed'} (p50 {us(min(cpp_op.values()))}–"
                   f"{us(worst)} µs over all sizes)")
    raw = values(RAW)
    for title, key in [("C++", ("ferry", "c++", "node", "loan")),
                       ("Python", ("ferry", "python", "node", "loan"))]:
        node = values(key)
        common_sizes = [s for s in node if s in raw]
        if common_sizes:
            ratios = {s: node[s] / raw[s] for s in common_sizes}
            over = [common.size_label(s) for s, r in ratios.items() if r > 1.5]
            out.append(f"- node→node ({title}, loan) within 1.5× of the raw transport: "
                       f"{'met' if not over else 'missed at ' + ', '.join(over)} "
                       f"(ratio {min(ratios.values()):.2f}–{max(ratios.values()):.2f})")
    for title, key in [("C++ loan", ("ferry", "c++", "node", "loan")),
                       ("Python loan", ("ferry", "python", "node", "loan")),
                       ("C++ operators", ("ferry", "c++", "operator", "in-process"))]:
        series = values(key)
        if len(series) >= 2:
            small, large = series[min(series)], series[max(series)]
            out.append(f"- flat in message size ({title}): p50 {us(small)} µs at "
                       f"{common.size_label(min(series))}, {us(large)} µs at "
                       f"{common.size_label(max(series))} ({large / small:.2f}×)")
    pairs = [("Python nodes, loan", ("ferry", "python", "node", "loan"),
              ("dora-rs", "python", "node", "blocking")),
             ("Python nodes, copy", ("ferry", "python", "node", "copy"),
              ("dora-rs", "python", "node", "blocking")),
             ("Python operators", ("ferry", "python", "operator", "in-process"),
              ("dora-rs", "python", "operator", "runtime")),
             ("C++ operators vs dora-rs Python operators",
              ("ferry", "c++", "operator", "in-process"),
              ("dora-rs", "python", "operator", "runtime"))]
    for title, ferry_key, dora_key in pairs:
        ferry, dora = values(ferry_key), values(dora_key)
        both = [s for s in ferry if s in dora]
        if both:
            ratios = {s: dora[s] / ferry[s] for s in both}
            under = [f"{common.size_label(s)} ({r:.1f}×)" for s, r in ratios.items() if r < 10]
            out.append(f"- ≥ 10× faster than dora-rs ({title}): "
                       f"{'met' if not under else 'missed at ' + ', '.join(under)} "
                       f"(dora/Ferry {min(ratios.values()):.1f}×–{max(ratios.values()):.0f}×)")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", nargs="*", default=[])
    parser.add_argument("--floor")
    parser.add_argument("--machine")
    parser.add_argument("--missing", action="append", default=[])
    args = parser.parse_args()
    records = load(args.results)
    floor = common.load_key_values(args.floor)
    lines = ["## Dataflow runtime: node→node and operator→operator latency", ""]
    lines += node_section(records, floor)
    lines += [""] + operator_section(records)
    checked = goals(records)
    if checked:
        lines += ["", "Goals, from the p50 figures above:", ""] + checked
    if floor:
        lines += ["", "Floor (floor.c, sender and receiver on two cores): futex one-way p50 "
                  f"{us(floor.get('futex_oneway_p50_us'))} µs, p99 "
                  f"{us(floor.get('futex_oneway_p99_us'))} µs; spin one-way p50 "
                  f"{us(floor.get('spin_oneway_p50_us'))} µs; memcpy "
                  f"{floor.get('memcpy_gbps', float('nan')):.1f} GB/s."]
    for entry in args.missing:
        name, _, reason = entry.partition("=")
        lines.append(f"- Not measured: {name}: {reason}")
    machine = common.load_key_values(args.machine)
    if machine:
        lines += ["", f"Machine: {machine.get('cpu', '?')}, {int(machine.get('cores', 0))} cores; "
                  f"load average before: {machine.get('load_before', '?')}, after: "
                  f"{machine.get('load_after', '?')}."]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
