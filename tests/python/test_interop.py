"""Ferry streams and batches consumed by polars, duckdb and nanoarrow, and
streams from them imported by Ferry, all without copying Ferry's buffers."""

import duckdb
import nanoarrow as na
import polars as pl
import pyarrow as pa
import pytest

import ferry


def test_polars_reads_a_ferry_batch():
    batch = ferry.sample_batch(50)
    frame = pl.DataFrame(batch)
    assert frame.shape == (50, 4)
    assert frame["id"].to_list() == list(range(50))
    assert frame["name"].null_count() == len([i for i in range(50) if i % 7 == 6])
    assert frame["tags"][5].to_list() == ["t0", "t1"]


def test_polars_stream_into_ferry():
    frame = pl.DataFrame({"x": [1, 2, 3], "y": ["a", "b", None]})
    stream = ferry.import_arrow(frame)
    assert isinstance(stream, ferry.ArrayStream)
    batches = stream.read_all()
    assert sum(b.num_rows for b in batches) == 3
    back = pa.Table.from_batches([pa.record_batch(b) for b in batches])
    assert back.column("x").to_pylist() == [1, 2, 3]
    assert back.column("y").to_pylist() == ["a", "b", None]


def test_duckdb_queries_a_ferry_stream():
    batches = [ferry.sample_batch(10), ferry.sample_batch(10).slice(2, 5)]
    source = ferry.stream_of(batches)
    con = duckdb.connect()
    result = con.sql("SELECT count(*) AS n, sum(id) AS s FROM source").fetchall()
    assert result == [(15, sum(range(10)) + sum(range(2, 7)))]


def test_duckdb_result_into_ferry():
    con = duckdb.connect()
    relation = con.sql("SELECT range AS i, 'v' || range::VARCHAR AS s FROM range(1000)")
    reader = relation.to_arrow_reader(256)
    stream = ferry.import_arrow(reader)
    rows = 0
    for batch in stream:
        batch.validate(full=True)
        rows += batch.num_rows
    assert rows == 1000


def test_nanoarrow_reads_ferry_and_ferry_reads_nanoarrow():
    batch = ferry.sample_batch(8)
    array = na.c_array(batch)
    assert array.length == 8
    assert na.c_schema(batch).format == "+s"
    back = ferry.import_arrow(na.c_array([1, 2, 3], na.int32()))
    assert len(back) == 3
    assert pa.array(back).to_pylist() == [1, 2, 3]


def test_stream_export_roundtrip_through_pyarrow():
    batches = [ferry.sample_batch(5), ferry.sample_batch(7)]
    reader = pa.RecordBatchReader.from_stream(ferry.stream_of(batches))
    table = reader.read_all()
    assert table.num_rows == 12
    assert table.schema.metadata == {b"producer": b"ferry"}


def test_stream_is_one_shot():
    stream = ferry.stream_of([ferry.sample_batch(3)])
    pa.RecordBatchReader.from_stream(stream).read_all()
    with pytest.raises(ValueError, match="consumed"):
        stream.__arrow_c_stream__()


def test_stream_errors_travel_to_ferry():
    def generate():
        yield pa.record_batch({"a": [1]})
        raise RuntimeError("source broke")

    schema = pa.schema([("a", pa.int64())])
    reader = pa.RecordBatchReader.from_batches(schema, generate())
    stream = ferry.import_arrow(reader)
    assert stream.read_next().num_rows == 1
    with pytest.raises(Exception, match="source broke"):
        stream.read_next()


def test_record_batch_exports_a_stream():
    batch = ferry.sample_batch(4)
    table = pa.table(batch)
    assert table.num_rows == 4
    assert table.column("id").chunk(0).buffers()[1].address == batch.column("id").buffers()[1][0]
