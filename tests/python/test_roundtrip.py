"""pyarrow -> ferry -> pyarrow round trips of every Arrow type: equal values,
unchanged buffer addresses, and zero bytes copied according to telemetry."""

import datetime
import decimal

import numpy as np
import pyarrow as pa
import pytest

import ferry


class Point(pa.ExtensionType):
    def __init__(self):
        super().__init__(pa.struct([("x", pa.float64()), ("y", pa.float64())]), "ferry.point")

    def __arrow_ext_serialize__(self):
        return b"v1"

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        return cls()


pa.register_extension_type(Point())


def _cases():
    ts = datetime.datetime(2024, 5, 6, 7, 8, 9)
    cases = {
        "null": pa.array([None, None, None], pa.null()),
        "bool": pa.array([True, None, False, True]),
        "int8": pa.array([1, None, -128, 127], pa.int8()),
        "uint8": pa.array([1, None, 255], pa.uint8()),
        "int16": pa.array([1, None, -32768], pa.int16()),
        "uint16": pa.array([1, None, 65535], pa.uint16()),
        "int32": pa.array([1, None, -(2**31)], pa.int32()),
        "uint32": pa.array([1, None, 2**32 - 1], pa.uint32()),
        "int64": pa.array([1, None, -(2**63)], pa.int64()),
        "uint64": pa.array([1, None, 2**64 - 1], pa.uint64()),
        "float16": pa.array(np.array([1.5, 2.25, -0.0], dtype=np.float16), pa.float16()),
        "float32": pa.array([1.5, None, float("inf")], pa.float32()),
        "float64": pa.array([1.5, None, -1e300], pa.float64()),
        "decimal32": pa.array([decimal.Decimal("1.23"), None], pa.decimal32(7, 2)),
        "decimal64": pa.array([decimal.Decimal("-1.23"), None], pa.decimal64(12, 2)),
        "decimal128": pa.array([decimal.Decimal("12345.678"), None], pa.decimal128(20, 3)),
        "decimal256": pa.array([decimal.Decimal("1" * 40), None], pa.decimal256(45, 0)),
        "binary": pa.array([b"a", None, b"\x00\xff", b""], pa.binary()),
        "large_binary": pa.array([b"a", None, b"xyz"], pa.large_binary()),
        "binary_view": pa.array([b"short", None, b"a value longer than twelve bytes"], pa.binary_view()),
        "string": pa.array(["héllo", None, "", "wörld"], pa.string()),
        "large_string": pa.array(["a", None, "bc"], pa.large_string()),
        "string_view": pa.array(["tiny", None, "this string is stored out of line"], pa.string_view()),
        "fixed_size_binary": pa.array([b"abc", None, b"xyz"], pa.binary(3)),
        "date32": pa.array([datetime.date(2024, 1, 2), None], pa.date32()),
        "date64": pa.array([datetime.date(2024, 1, 2), None], pa.date64()),
        "time32s": pa.array([1, None, 86399], pa.time32("s")),
        "time32ms": pa.array([1, None], pa.time32("ms")),
        "time64us": pa.array([1, None], pa.time64("us")),
        "time64ns": pa.array([1, None], pa.time64("ns")),
        "timestamp_s": pa.array([ts, None], pa.timestamp("s")),
        "timestamp_ms_tz": pa.array([ts, None], pa.timestamp("ms", tz="Europe/Paris")),
        "timestamp_us_utc": pa.array([ts, None], pa.timestamp("us", tz="UTC")),
        "timestamp_ns": pa.array([ts, None], pa.timestamp("ns")),
        "duration_s": pa.array([1, None], pa.duration("s")),
        "duration_ns": pa.array([1, None], pa.duration("ns")),
        "interval_mdn": pa.array([pa.MonthDayNano([1, 2, 3]), None], pa.month_day_nano_interval()),
        "list": pa.array([[1, 2], None, [], [3]], pa.list_(pa.int32())),
        "large_list": pa.array([["a"], None, ["b", None]], pa.large_list(pa.string())),
        "list_view": pa.array([[1, 2], None, [3]], pa.list_view(pa.int64())),
        "large_list_view": pa.array([[1], [], None], pa.large_list_view(pa.int16())),
        "fixed_size_list": pa.array([[1, 2], None, [3, None]], pa.list_(pa.int8(), 2)),
        "struct": pa.array([{"a": 1, "b": "x"}, None, {"a": None, "b": "y"}],
                           pa.struct([("a", pa.int32()), ("b", pa.string())])),
        "map": pa.array([[("k", 1)], None, [("a", 2), ("b", None)]], pa.map_(pa.string(), pa.int32())),
        "map_sorted": pa.array([[("a", 1), ("b", 2)]], pa.map_(pa.string(), pa.int32(), keys_sorted=True)),
        "dense_union": pa.UnionArray.from_dense(
            pa.array([0, 1, 0], pa.int8()), pa.array([0, 0, 1], pa.int32()),
            [pa.array([1, 2], pa.int64()), pa.array(["x"], pa.string())], ["i", "s"], [0, 1]),
        "sparse_union": pa.UnionArray.from_sparse(
            pa.array([0, 1, 1], pa.int8()),
            [pa.array([1, 2, 3], pa.int64()), pa.array(["x", None, "z"], pa.string())]),
        "union_type_codes": pa.UnionArray.from_sparse(
            pa.array([5, 9], pa.int8()),
            [pa.array([1, 2], pa.int64()), pa.array([True, False])], ["a", "b"], [5, 9]),
        "run_end_encoded": pa.RunEndEncodedArray.from_arrays(
            pa.array([2, 5, 6], pa.int32()), pa.array(["a", None, "c"])),
        "dictionary": pa.array(["a", "b", None, "a"]).dictionary_encode(),
        "dictionary_ordered": pa.DictionaryArray.from_arrays(
            pa.array([0, 1, 0], pa.int16()), pa.array(["lo", "hi"]), ordered=True),
        "extension": pa.ExtensionArray.from_storage(
            Point(), pa.array([{"x": 1.0, "y": 2.0}, None],
                              pa.struct([("x", pa.float64()), ("y", pa.float64())]))),
        "nested": pa.array([[{"p": [1, 2], "q": {"r": "s"}}], None, []],
                           pa.list_(pa.struct([("p", pa.list_(pa.int64())),
                                               ("q", pa.struct([("r", pa.string())]))]))),
        "empty": pa.array([], pa.int32()),
        "empty_string": pa.array([], pa.string()),
        "all_null": pa.array([None, None], pa.string()),
    }
    return cases


CASES = _cases()


def _addresses(array):
    return [b.address if b is not None else None for b in array.buffers()]


@pytest.mark.parametrize("name", sorted(CASES))
def test_roundtrip_keeps_values_and_buffers(name):
    original = CASES[name]
    ferry.reset_telemetry()
    imported = ferry.import_arrow(original)
    assert isinstance(imported, ferry.Array)
    assert len(imported) == len(original)
    imported.validate(full=True)
    back = pa.array(imported)
    assert back.type == original.type
    assert back.equals(original)
    assert _addresses(back) == _addresses(original)
    counters = ferry.telemetry()
    assert counters["bytes_copied_host"] == 0
    assert counters["zero_copy_imports"] == 1
    assert counters["zero_copy_exports"] == 1


@pytest.mark.parametrize("name", sorted(n for n, a in CASES.items() if len(a) >= 2))
def test_sliced_roundtrip(name):
    original = CASES[name]
    sliced = original.slice(1, len(original) - 1)
    imported = ferry.import_arrow(sliced)
    assert imported.offset == sliced.offset
    back = pa.array(imported)
    assert back.equals(sliced)
    assert _addresses(back) == _addresses(sliced)
    # Ferry's own slice of the imported array matches pyarrow's slice.
    again = pa.array(ferry.import_arrow(original).slice(1))
    assert again.equals(sliced)


def test_extension_metadata_travels():
    imported = ferry.import_arrow(CASES["extension"])
    metadata = imported.schema.metadata
    assert metadata[b"ARROW:extension:name"] == b"ferry.point"
    assert metadata[b"ARROW:extension:metadata"] == b"v1"


def test_record_batch_roundtrip_with_metadata():
    batch = pa.record_batch(
        {"a": pa.array([1, 2, 3]), "b": pa.array(["x", None, "z"])},
        metadata={"origin": "test"})
    imported = ferry.record_batch(batch)
    assert imported.num_rows == 3
    assert imported.column_names == ["a", "b"]
    back = pa.record_batch(imported)
    assert back.equals(batch)
    assert back.schema.metadata == {b"origin": b"test"}
    assert _addresses(back.column(1)) == _addresses(batch.column(1))


def test_ferry_batch_into_pyarrow_is_zero_copy():
    ferry.reset_telemetry()
    batch = ferry.sample_batch(100)
    arrow = pa.record_batch(batch)
    assert arrow.num_rows == 100
    assert arrow.column("id").buffers()[1].address == batch.column("id").buffers()[1][0]
    assert arrow.column("name").null_count == len([i for i in range(100) if i % 7 == 6])
    assert ferry.telemetry()["bytes_copied_host"] == 0
    del arrow
    del batch


def test_release_runs_when_last_user_is_gone():
    ferry.reset_telemetry()
    arr = pa.array([1, 2, 3])
    imported = ferry.import_arrow(arr)
    child = pa.array(imported)
    del imported
    assert ferry.telemetry()["foreign_releases"] == 0  # `child` still points into it
    del child
    assert ferry.telemetry()["foreign_releases"] == 1


def test_requested_schema_relabels_without_copy():
    arr = ferry.import_arrow(pa.array([b"ab", b"cd"], pa.binary()))
    as_text = pa.array(arr, type=pa.string())
    assert as_text.type == pa.string()
    assert as_text.to_pylist() == ["ab", "cd"]
    # An impossible request is ignored (best effort): the original type comes back.
    schema_capsule, _ = arr.__arrow_c_array__(requested_schema=pa.int64().__arrow_c_schema__())
    assert pa.DataType._import_from_c_capsule(schema_capsule) == pa.binary()


def test_schema_import():
    schema = ferry.import_arrow(pa.schema([("a", pa.int32()), ("b", pa.list_(pa.string()))]))
    assert isinstance(schema, ferry.Schema)
    assert schema.field_names == ["a", "b"]
    assert schema.format == "+s"
    assert pa.schema(schema) == pa.schema([("a", pa.int32()), ("b", pa.list_(pa.string()))])
