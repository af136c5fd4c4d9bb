"""Markdown tables of one transport benchmark run: Ferry next to iceoryx2 and
dora-rs, each with its ratio to this machine's floor (floor.c).

    python bench/transport/report.py --results a.json b.json ... \\
        --floor "ferry_cpp/same core=floor_ferry_cpp_same.txt" ... [--machine machine.txt] \\
        [--missing "Ferry Python=reason"]

Every results file is a JSON list of records as common.record writes them
(transport_bench.cc writes the same fields). Each --floor "NAME/PLACEMENT=PATH"
holds floor.c's output measured right before system NAME (ferry_cpp,
ferry_python, iceoryx2, dora) with its processes placed as PLACEMENT ("same
core" or "two cores"), and that system's ratios use it. Systems without
results leave their columns out.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# Published figures the issue asks to beat (not measured here).
ANCHORS = [
    ("dora-rs Python p50, published", {8: 320.0, 40_000_000: 500.0}),
    ("dora 0.x nodes p50, published", {8: 545.0, 40_000_000: 4800.0}),
]

# Columns: (title, system, language, mode). Blocking waits are compared with
# floor.c's futex ping-pong, busy-polling with its spin ping-pong.
BLOCKING = [
    ("Ferry C++", "ferry", "c++", "futex"),
    ("Ferry Python", "ferry", "python", "futex"),
    ("iceoryx2 Python", "iceoryx2", "python", "event"),
    ("dora-rs Python", "dora-rs", "python", "blocking"),
]
BUSY = [
    ("Ferry C++", "ferry", "c++", "busy"),
    ("Ferry Python", "ferry", "python", "busy"),
    ("iceoryx2 Python", "iceoryx2", "python", "busy"),
]
FLOOR_KEYS = ["futex_oneway_p50_us", "futex_oneway_p99_us", "spin_oneway_p50_us",
              "spin_oneway_p99_us", "memcpy_gbps"]


def load(paths: list[str]) -> dict:
    """(system, language, mode, placement, size) -> record."""
    return common.load_records(paths, lambda record: (
        record["system"], record["language"], record["mode"],
        record.get("placement", "unpinned"), record["size"]))


def floor_name(system: str, language: str) -> str:
    """The name run.sh gives the floor run that precedes a system."""
    if system == "ferry":
        return "ferry_cpp" if language == "c++" else "ferry_python"
    return {"dora-rs": "dora"}.get(system, system)


def us(value) -> str:
    if value is None or math.isnan(value):
        return "–"
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def ratio(a, b) -> str:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return "–"
    value = a / b
    return f"{value:.2f}" if value < 10 else f"{value:,.0f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def floor_table(floors: dict, machine: dict) -> str:
    header = ["floor.c run before", "placement", "load average (1 min)"] + FLOOR_KEYS
    rows = []
    for (name, placement), values in floors.items():
        load = machine.get(f"load_before_{name}")
        rows.append([name, placement, f"{load:.2f}" if isinstance(load, float) else "–"]
                    + [f"{values[k]:g}" if k in values else "–" for k in FLOOR_KEYS])
    return table(header, rows)


def latency_table(records: dict, columns: list, placement: str, floor_key: str,
                  floors: dict) -> str:
    """p50 / p99 / p99.9 per column, each Ferry column's p50 over each other
    system's, and every system's p50 over the floor measured before it."""
    columns = [c for c in columns
               if any(k[:4] == (*c[1:], placement) for k in records)]
    if not columns:
        return ""
    ferrys = [c for c in columns if c[1] == "ferry"]
    others = [c for c in columns if c[1] != "ferry"]
    floor_of = {c: floors.get((floor_name(c[1], c[2]), placement), {}).get(floor_key)
                for c in columns}
    with_floor = [c for c in columns if floor_of[c]]
    header = ["payload"] + [f"{c[0]} p50 / p99 / p99.9 µs" for c in columns]
    header += [f"{f[0]} / {c[0].split(' ')[0]} (p50)" for f in ferrys for c in others]
    header += [f"{c[0]} / floor (p50)" for c in with_floor]
    rows = []
    for size in common.SIZES:
        row = [common.size_label(size)]
        p50 = {}
        for column in columns:
            record = records.get((*column[1:], placement, size))
            if record:
                p50[column] = record["p50_us"]
                row.append(f"{us(record['p50_us'])} / {us(record['p99_us'])} / "
                           f"{us(record['p999_us'])}")
            else:
                row.append("–")
        row += [ratio(p50.get(f), p50.get(c)) for f in ferrys for c in others]
        row += [ratio(p50.get(c), floor_of[c]) for c in with_floor]
        rows.append(row)
    return table(header, rows)


def throughput_table(records: dict, floors: dict, placement: str) -> str:
    """Per system: messages per second of a burst, payload GB/s, and from
    400 KiB up that bandwidth over floor.c's memcpy (smaller payloads stay in
    the caches, where a 256 MiB memcpy says little); then each Ferry column
    over each other system in the same wait mode."""
    columns = []
    for title, system, language, mode in BLOCKING + BUSY:
        if any(k[:4] == (system, language, mode, placement) for k in records):
            kind = "busy-poll" if mode == "busy" else "blocking"
            columns.append((f"{title} {kind}", system, language, mode))
    if not columns:
        return ""
    memcpy = {c: floors.get((floor_name(c[1], c[2]), placement), {}).get("memcpy_gbps")
              for c in columns}
    pairs = [(f, o) for f in columns if f[1] == "ferry"
             for o in columns if o[1] != "ferry" and (o[3] == "busy") == (f[3] == "busy")]
    header = (["payload"] + [f"{c[0]} msg/s (GB/s, × memcpy)" for c in columns]
              + [f"{' '.join(f[0].split(' ')[:2])} / {o[0].split(' ')[0]} ({o[0].split(' ')[-1]},"
                 " msg/s)" for f, o in pairs])
    rows = []
    for size in common.SIZES:
        row = [common.size_label(size)]
        rate = {}
        for column in columns:
            record = records.get((*column[1:], placement, size))
            if not record or "msgs_per_s" not in record:
                row.append("–")
                continue
            rate[column] = record["msgs_per_s"]
            cell = f"{record['msgs_per_s']:,.0f} ({record['gb_per_s']:.2f}"
            if size >= 400 * common.KIB and memcpy[column]:
                cell += f", {ratio(record['gb_per_s'], memcpy[column])}×"
            cell += ")" + (" *" if record.get("note") else "")
            row.append(cell)
        row += [ratio(rate.get(f), rate.get(o)) for f, o in pairs]
        rows.append(row)
    text = table(header, rows)
    notes = [f"{r['system']} {common.size_label(r['size'])}: {r['note']}"
             for k, r in records.items() if k[3] == placement and r.get("note")]
    if notes:
        text += "\n\n\\* " + "; ".join(notes) + "."
    return text


def anchor_table(records: dict) -> str:
    def p50(system, language, mode, placement, size):
        record = records.get((system, language, mode, placement, size))
        return record["p50_us"] if record else None

    placements = [p for p in ("two cores", "same core", "unpinned")
                  if any(k[3] == p for k in records)] or ["two cores"]
    where = " / ".join("one core" if p == "same core" else p for p in placements)
    header = (["payload"] + [f"{name} µs" for name, _ in ANCHORS]
              + [f"{name} p50 here ({where}) µs"
                 for name in ("dora-rs Python", "Ferry Python", "Ferry C++")])
    rows = []
    for size in (8, 40_000_000):
        row = [common.size_label(size)] + [us(values.get(size)) for _, values in ANCHORS]
        for key in (("dora-rs", "python", "blocking"), ("ferry", "python", "futex"),
                    ("ferry", "c++", "futex")):
            row.append(" / ".join(us(p50(*key, placement, size)) for placement in placements))
        rows.append(row)
    return table(header, rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", nargs="*", default=[])
    parser.add_argument("--floor", action="append", default=[],
                        help="NAME/PLACEMENT=PATH: floor.c's output before system NAME")
    parser.add_argument("--machine", help="key=value lines (load averages) from run.sh")
    parser.add_argument("--missing", action="append", default=[],
                        help="SYSTEM=REASON for a system that did not run")
    args = parser.parse_args()
    records = load(args.results)
    floors = {}
    for entry in args.floor:
        name, _, path = entry.partition("=")
        values = common.load_key_values(path)
        if values:
            system, _, placement = name.partition("/")
            floors[(system, placement)] = values
    machine = common.load_key_values(args.machine)

    out = ["### Cross-process transport: one-way latency and throughput", ""]
    for reason in args.missing:
        system, _, why = reason.partition("=")
        out += [f"Not measured: **{system}**: {why}.", ""]
    if floors:
        out += ["#### Floor (floor.c, run right before each system, pinned as it is)", "",
                floor_table(floors, machine), ""]
    sections = [
        ("Blocking wait, sender and receiver on one core", BLOCKING, "same core",
         "futex_oneway_p50_us"),
        ("Blocking wait, sender and receiver on two cores", BLOCKING, "two cores",
         "futex_oneway_p50_us"),
        ("Blocking wait, placement left to the scheduler", BLOCKING, "unpinned",
         "futex_oneway_p50_us"),
        ("Busy-poll, two cores", BUSY, "two cores", "spin_oneway_p50_us"),
        ("Busy-poll, placement left to the scheduler", BUSY, "unpinned", "spin_oneway_p50_us"),
    ]
    for title, columns, placement, floor_key in sections:
        text = latency_table(records, columns, placement, floor_key, floors)
        if text:
            out += [f"#### Latency: {title}", "", text, ""]
    for placement, title in (("same core", "one core"), ("two cores", "two cores"),
                             ("unpinned", "placement left to the scheduler")):
        throughput = throughput_table(records, floors, placement)
        if throughput:
            out += [f"#### Throughput, {title} (bursts; the sender writes every payload)", "",
                    throughput, ""]
    out += ["#### Published anchors next to this run", "", anchor_table(records), ""]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
