"""The Arrow C Device Data Interface from Python: device capsules with
pyarrow, device batches on OpenCL (PoCL), and the counted CPU fallback."""

import pyarrow as pa
import pytest

import ferry


def _has_opencl():
    return bool(ferry.devices().present("opencl"))


SPEC_TYPES = ("cpu", "cuda", "cuda_host", "opencl", "vulkan", "metal", "rocm", "oneapi",
              "webgpu", "hexagon", "cuda_managed", "ext_dev", "vpi", "rocm_host")


def test_devices_lists_every_spec_type():
    devices = ferry.devices()
    assert isinstance(devices, list)
    assert {d["type"] for d in devices} == set(SPEC_TYPES)
    for device in devices:
        assert set(device) == {"type", "id", "name", "present", "reason"}
        if device["present"]:
            assert device["name"] and device["reason"] == ""
        else:
            assert device["id"] == -1 and device["name"] == "" and device["reason"]
    # The host is always there.
    cpus = devices.present("cpu")
    assert len(cpus) == 1 and cpus[0]["present"]
    # Printing reads as one line per type, as it did before it was a list.
    text = str(devices)
    for name in SPEC_TYPES:
        assert sum(line.startswith(f"{name}: ") for line in text.splitlines()) == 1
    assert repr(devices) == text
    cuda = next(d for d in devices if d["type"] == "cuda")
    if not cuda["present"]:
        assert f'cuda: absent ({cuda["reason"]})' in text


def test_pyarrow_consumes_ferry_cpu_device_array():
    batch = ferry.sample_batch(20)
    schema_capsule, array_capsule = batch.__arrow_c_device_array__()
    arrow = pa.RecordBatch._import_from_c_device_capsule(schema_capsule, array_capsule)
    assert arrow.num_rows == 20
    assert arrow.column("id").buffers()[1].address == batch.column("id").buffers()[1][0]


def test_ferry_consumes_pyarrow_device_array():
    source = pa.array([1, 2, None, 4])
    ferry.reset_telemetry()
    imported = ferry.import_arrow(source)  # asks __arrow_c_device_array__ first
    assert imported.device_type == "cpu"
    assert imported.buffers()[1][0] == source.buffers()[1].address
    assert pa.array(imported).equals(source)
    assert ferry.telemetry()["bytes_copied_host"] == 0


class DeviceOnly:
    """Forwards only the device protocol methods of another object, so that
    the consumer must go through the device capsules."""

    def __init__(self, inner):
        self.inner = inner

    def __arrow_c_device_stream__(self, requested_schema=None, **kwargs):
        return self.inner.__arrow_c_device_stream__(requested_schema, **kwargs)


class DeviceArrayOnly(DeviceOnly):
    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return self.inner.__arrow_c_device_array__(requested_schema, **kwargs)


def test_device_stream_between_ferry_objects():
    ids = ferry.sample_batch(3).column("id").buffers()[1][0]
    stream = ferry.stream_of([ferry.sample_batch(3), ferry.sample_batch(4)])
    imported = ferry.import_arrow(DeviceOnly(stream))
    batches = imported.read_all()
    assert [b.num_rows for b in batches] == [3, 4]
    assert all(b.device_type == "cpu" for b in batches)
    assert ids != 0


def test_device_stream_of_a_record_batch_keeps_buffers():
    batch = ferry.sample_batch(5)
    imported = ferry.import_arrow(DeviceOnly(batch)).read_all()
    assert imported[0].column("id").buffers()[1][0] == batch.column("id").buffers()[1][0]


def test_unknown_keyword_arguments_raise_not_implemented():
    batch = ferry.sample_batch(2)
    with pytest.raises(NotImplementedError, match="stream_flavour"):
        batch.__arrow_c_device_array__(stream_flavour="fast")
    with pytest.raises(NotImplementedError):
        batch.__arrow_c_device_stream__(anything=1)


@pytest.mark.skipif(not _has_opencl(), reason="no OpenCL device (PoCL) in this environment")
def test_opencl_batch_exchange_is_zero_copy_between_ferry_objects():
    host = ferry.sample_batch(100)
    on_device = ferry.to_device(host, "opencl", 0)
    assert on_device.device_type == "opencl"
    ferry.reset_telemetry()
    again = ferry.import_arrow(DeviceArrayOnly(on_device))  # through the device capsule
    assert again.device_type == "opencl"
    for column in range(on_device.num_columns):
        assert again.children[column].buffers() == on_device.column(column).buffers()
    counters = ferry.telemetry()
    # Only the last offsets of the two variable-length columns (and the list's
    # child) are read from the device; no buffer is copied.
    assert counters["bytes_copied_d2h"] <= 3 * 4
    assert counters["bytes_copied_h2d"] == 0
    assert counters["zero_copy_imports"] == 1


@pytest.mark.skipif(not _has_opencl(), reason="no OpenCL device (PoCL) in this environment")
def test_opencl_batch_to_pyarrow_is_a_counted_copy():
    host = ferry.sample_batch(50)
    on_device = ferry.to_device(host, "opencl", 0)
    ferry.reset_telemetry()
    # __arrow_c_array__ promises CPU memory. (pyarrow's own pa.record_batch
    # asks for the device capsule first and refuses OpenCL memory.)
    arrow = pa.RecordBatch._import_from_c_capsule(*on_device.__arrow_c_array__())
    assert arrow.equals(pa.record_batch(host))
    counters = ferry.telemetry()
    assert counters["bytes_copied_d2h"] > 0
    assert counters["fallback_unsupported_device_type"] == 1
