"""Ferry's full validation against pyarrow's on random raw C Data arrays.

The cases come from cdata_fuzz (fixed seed, arrays built with ctypes from
outside any Arrow library). Ferry must never call an array valid that
pyarrow's validate(full=True) rejects, and every slice, child and dictionary
Ferry exports from a valid array must pass both. Where Ferry refuses what
pyarrow accepts, the rule must be one of the documented ones
(docs/exchange.md, "Full validation and Arrow C++").

FERRY_FUZZ_CASES sets the count (default 4000); scripts/fuzz runs long ones.
"""

import ctypes
import os
import re

import pyarrow as pa
import pytest

import cdata_fuzz
import ferry

SEED = 20261202
CASES = int(os.environ.get("FERRY_FUZZ_CASES", "4000"))

# Rules (numbers as N) where Ferry is stricter than Arrow C++'s ValidateFull;
# each is listed in docs/exchange.md with the reason.
KNOWN_STRICTER = [
    r"offset is negative",  # pyarrow does not check a C array's own offset
    r"null_count N exceeds length N",  # pyarrow resets a null array's count
    r"n_buffers is N but type null needs N",  # pyarrow ignores a null array's buffers
    r"child N \('.*'\) is too short",  # fixed-size list: (offset + length) * size
    r"run_ends and values must have the same length",  # Arrow: values may be longer
    # pyarrow's importer drops the null_count of a union or run-end array
    r"\w+ arrays have no validity bitmap, so null_count must be N",
]


def _report(records):
    return "\n".join(f"case {r['case']} ({r['type']}, corrupted by {r['corruptions']}): "
                     f"{r['verdict']} {r.get('part', '')}: {r['message']}" for r in records[:20])


def test_ferry_never_certifies_what_pyarrow_rejects():
    summary = cdata_fuzz.run_cases(SEED, CASES)
    assert summary.cases == CASES
    assert not summary.failures, _report(summary.failures)
    # The generator must exercise both sides.
    assert summary.both_valid > CASES // 4
    assert summary.ferry_invalid > CASES // 10


def test_where_ferry_is_stricter_than_pyarrow_is_documented():
    summary = cdata_fuzz.run_cases(SEED + 1, min(CASES, 2000), stricter=True)
    assert not summary.failures, _report(summary.failures)
    unknown = {rule: example for rule, (_count, example) in summary.stricter.items()
               if not any(re.match(known, rule) for known in KNOWN_STRICTER)}
    assert not unknown, _report(list(unknown.values()))


# ---- The gaps that once let invalid arrays through, one by one ---------------


def _buffer(data: bytes) -> bytearray:
    return cdata_fuzz.padded(data)


def _node(fmt, length, buffers, children=(), offset=0, null_count=0):
    return cdata_fuzz.Node(cdata_fuzz.Type(fmt), length, offset, null_count, list(buffers),
                           list(children), capacity=offset + length)


def _map_with_null_key():
    key, value = cdata_fuzz.Type("i"), cdata_fuzz.Type("i")
    entries_type = cdata_fuzz.Type("+s", [("key", key, 0), ("value", value, 2)])
    map_type = cdata_fuzz.Type("+m", [("entries", entries_type, 0)])
    keys = _node("i", 2, [_buffer(bytes([0b01])), _buffer(cdata_fuzz.pack([1, 2], 4))],
                 null_count=1)
    keys.type = key
    values = _node("i", 2, [None, _buffer(cdata_fuzz.pack([10, 20], 4))])
    values.type = value
    entries = cdata_fuzz.Node(entries_type, 2, 0, 0, [None], [keys, values], capacity=2)
    # The map's one slot refers to entry 0 only; the null key is entry 1.
    root = cdata_fuzz.Node(map_type, 1, 0, 0, [None, _buffer(cdata_fuzz.pack([0, 1], 4))],
                           [entries], capacity=1)
    return map_type, root


def test_map_with_a_null_key_is_refused_and_never_reaches_pyarrow():
    # pyarrow aborts the process on importing this map; Ferry must refuse it
    # in full validation and refuse to export it.
    map_type, root = _map_with_null_key()
    producer = cdata_fuzz.Producer(map_type, root)
    imported = ferry.import_arrow(producer)
    ferry.validate(imported, full=False)  # structure alone is fine
    with pytest.raises(ValueError, match=r"array: map keys must not be null: 1 of the "
                                         r"2 keys are null"):
        ferry.validate(imported, full=True)
    with pytest.raises(ValueError, match="map keys must not be null"):
        pa.Array._import_from_c_capsule(*imported.__arrow_c_array__())
    del imported


@pytest.mark.parametrize("fmt,value,rule", [
    ("d:4,0,128", 10**4, r"decimal128\(4, 0\) values must fit the precision"),
    ("d:4,0,256", -(10**4), r"decimal256\(4, 0\) values must fit the precision"),
    ("d:4,0,32", 10**4, r"decimal32\(4, 0\) values must fit the precision"),
    ("ttm", 86400000, r"values must be times of day in \[0, 86400000\) ms"),
    ("ttn", -1, r"values must be times of day in \[0, 86400000000000\) ns"),
    ("tdm", 201, r"date64 values must be whole days"),
])
def test_values_outside_their_type_are_refused(fmt, value, rule):
    width = cdata_fuzz.FIXED_WIDTH.get(fmt) or int(fmt.split(",")[2]) // 8
    node = _node(fmt, 1, [None, _buffer(cdata_fuzz.pack([value], width))])
    producer = cdata_fuzz.Producer(cdata_fuzz.Type(fmt), node)
    with pytest.raises(ValueError, match=rule):
        ferry.validate(ferry.import_arrow(producer), full=True)


def test_zero_length_struct_at_an_offset_past_its_child_is_refused():
    child = _node("i", 10, [None, _buffer(bytes(40))])
    struct_type = cdata_fuzz.Type("+s", [("a", child.type, 2)])
    node = cdata_fuzz.Node(struct_type, 0, 17, 0, [None], [child], capacity=17)
    with pytest.raises(ValueError, match=r"child 0 \('a'\) is too short: offset \+ length needs "
                                         r"length 17, child has 10"):
        ferry.import_arrow(cdata_fuzz.Producer(struct_type, node))


def test_zero_length_view_slices_reach_pyarrow_at_offset_zero():
    # pyarrow refuses its own zero-length view slices at an offset; Ferry
    # hands them on at offset 0.
    source = ferry.import_arrow(pa.array(["a", "a value past twelve bytes"] * 4, pa.string_view()))
    empty = source.slice(6, 0)
    ferry.validate(empty, full=True)
    array = pa.Array._import_from_c_capsule(*empty.__arrow_c_array__())
    array.validate(full=True)
    assert len(array) == 0 and array.offset == 0


def test_zero_length_views_without_a_views_buffer_at_an_offset_are_refused():
    node = _node("vu", 0, [None, None, _buffer(bytes(8))], offset=6)
    with pytest.raises(ValueError, match="views buffer \\(buffer 1\\) is too small"):
        ferry.import_arrow(cdata_fuzz.Producer(cdata_fuzz.Type("vu"), node))


def test_the_generator_builds_what_pyarrow_builds():
    # A well-formed case read by pyarrow directly equals Ferry's view of it.
    for index in range(200):
        t, node, corruptions, _rng = cdata_fuzz.make_case(SEED, index)
        # pyarrow's importer refuses zero-length views at an offset (see
        # test_zero_length_view_slices_reach_pyarrow_at_offset_zero).
        if corruptions or any(n.type.format in ("vz", "vu") and n.length == 0 and n.offset
                              for n in cdata_fuzz.nodes_of(node)):
            continue
        producer = cdata_fuzz.Producer(t, node)
        theirs = pa.Array._import_from_c_capsule(*producer.__arrow_c_array__())
        theirs.validate(full=True)
        ours = ferry.import_arrow(theirs)
        ferry.validate(ours, full=True)
        assert len(ours) == len(theirs)
        del ours, theirs


def test_ctypes_structs_match_the_c_abi():
    assert ctypes.sizeof(cdata_fuzz.ArrowSchema) == 72
    assert ctypes.sizeof(cdata_fuzz.ArrowArray) == 80
