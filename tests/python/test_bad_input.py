"""Hostile or broken Arrow data given to Ferry: clear errors, no crash."""

import ctypes

import pyarrow as pa
import pytest

import ferry


def test_validate_rejects_offsets_out_of_range_in_a_slice():
    # pyarrow checks only the last offset against the data; a slot whose
    # start lies beyond its end is a full-validation error.
    offsets = pa.array([3, 1, 4], pa.int32()).buffers()[1]
    bad = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(b"abcd")])
    with pytest.raises(ValueError, match="offset"):
        ferry.validate(bad, full=True)


def test_validate_rejects_decreasing_offsets():
    offsets = pa.array([0, 3, 1], pa.int32()).buffers()[1]
    bad = pa.Array.from_buffers(pa.binary(), 2, [None, offsets, pa.py_buffer(b"abc")])
    with pytest.raises(ValueError, match="offset"):
        ferry.validate(bad, full=True)


def test_validate_rejects_invalid_utf8():
    offsets = pa.array([0, 2], pa.int32()).buffers()[1]
    bad = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(b"\xc3\x28")])
    with pytest.raises(ValueError, match="UTF-8"):
        ferry.validate(bad, full=True)
    ferry.validate(bad, full=False)  # structure alone is fine


def test_validate_rejects_dictionary_index_out_of_range():
    indices = pa.array([0, 5], pa.int8())
    bad = pa.DictionaryArray.from_buffers(pa.dictionary(pa.int8(), pa.string()), 2,
                                          indices.buffers(), pa.array(["a", "b"]))
    with pytest.raises(ValueError, match="dictionary"):
        ferry.validate(bad, full=True)


def test_validate_rejects_wrong_null_count():
    validity = pa.py_buffer(bytes([0b00000101]))
    values = pa.array([1, 2, 3], pa.int32()).buffers()[1]
    bad = pa.Array.from_buffers(pa.int32(), 3, [validity, values], null_count=2)  # bitmap: 1 null
    with pytest.raises(ValueError, match="null"):
        ferry.validate(bad, full=True)


def test_objects_without_the_protocol_are_rejected():
    with pytest.raises(TypeError, match="PyCapsule"):
        ferry.import_arrow(42)


def test_wrong_capsules_are_rejected():
    class Liar:
        def __arrow_c_array__(self, requested_schema=None):
            schema = pa.int32().__arrow_c_schema__()
            return schema, schema  # second is not an arrow_array capsule

    with pytest.raises(TypeError, match="arrow_array"):
        ferry.import_arrow(Liar())


class _ArrowSchema(ctypes.Structure):
    pass


_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ArrowSchema))
_ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_char_p),
    ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64),
    ("children", ctypes.c_void_p), ("dictionary", ctypes.c_void_p),
    ("release", _RELEASE), ("private_data", ctypes.c_void_p),
]


@_RELEASE
def _release_schema(schema):
    schema.contents.release = _RELEASE()


def _schema_capsule(fmt: bytes, n_children=0):
    schema = _ArrowSchema(fmt, b"x", None, 2, n_children, None, None, _release_schema, None)
    _schema_capsule.keep.append(schema)
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new_capsule(ctypes.addressof(schema), b"arrow_schema", None)


_schema_capsule.keep = []


@pytest.mark.parametrize("fmt", [b"Q", b"w:", b"w:-3", b"d:5", b"tsz:", b"+w:", b"ii", b""])
def test_malformed_format_strings(fmt):
    capsule = _schema_capsule(fmt)

    class Holder:
        def __arrow_c_schema__(self):
            return capsule

    with pytest.raises(ValueError) as info:
        ferry.import_arrow(Holder())
    if fmt:
        assert fmt.decode() in str(info.value)


def test_struct_schema_with_missing_children_is_rejected():
    capsule = _schema_capsule(b"+s", n_children=2)  # children pointer is NULL

    class Holder:
        def __arrow_c_schema__(self):
            return capsule

    with pytest.raises(ValueError, match="children"):
        ferry.import_arrow(Holder())


def test_unknown_slice_ranges():
    arr = ferry.import_arrow(pa.array([1, 2, 3]))
    with pytest.raises(IndexError):
        arr.slice(5)
    with pytest.raises(IndexError):
        arr.slice(0, -1)
