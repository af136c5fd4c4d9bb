"""Ferry's main job for now (`make run`): a C++ producer builds a record batch,
hands it to pyarrow and to polars inside this one process, and the telemetry
shows that not a single byte was copied on the way."""

import sys

import polars as pl
import pyarrow as pa

import ferry


def main() -> int:
    ferry.reset_telemetry()
    batch = ferry.sample_batch(12)  # built by Ferry's C++ producer
    print(f"Ferry produced: {batch!r}")

    arrow_batch = pa.record_batch(batch)  # pyarrow imports through __arrow_c_array__
    print("\npyarrow sees:")
    print(pa.Table.from_batches([arrow_batch]).to_string(preview_cols=4))

    frame = pl.DataFrame(batch)  # polars imports through __arrow_c_stream__
    print("\npolars sees:")
    print(frame)

    # Proof by addresses: the id column's values buffer is the same memory in
    # Ferry, in pyarrow and in polars' own export.
    ferry_address = batch.column("id").buffers()[1][0]
    arrow_address = arrow_batch.column("id").buffers()[1].address
    polars_address = pa.record_batch(frame.to_arrow().to_batches()[0]).column("id").buffers()[1].address
    print(f"\nid values at 0x{ferry_address:x} in Ferry, 0x{arrow_address:x} in pyarrow, "
          f"0x{polars_address:x} in polars")

    counters = ferry.telemetry()
    copied = sum(v for k, v in counters.items() if k.startswith("bytes_copied"))
    print("\nTelemetry:")
    for name in ("zero_copy_exports", "schema_exports", "stream_batches_exported", "releases",
                 "bytes_copied_host", "bytes_copied_h2d", "bytes_copied_d2h", "bytes_copied_d2d"):
        print(f"  {name:26s} {counters[name]}")
    same = ferry_address == arrow_address == polars_address
    print(f"\nbytes copied by Ferry: {copied}; same buffers everywhere: {same}")
    return 0 if copied == 0 and same else 1


if __name__ == "__main__":
    sys.exit(main())
