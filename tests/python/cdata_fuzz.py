"""Random Arrow C Data arrays built from outside, for differential validation.

Every case is a raw ArrowSchema/ArrowArray pair made with ctypes (no Arrow
library builds it), reproducible from (seed, index): a random type of any
kind and depth, a well-formed array of it, and, in most cases, one to three
corruptions (a flipped byte, a boundary value, a changed length, offset,
null_count or child length, a NULL buffer, a wrong buffer count, a bad view
or variadic size). Every buffer is allocated with room to spare, so no read
that the array's own lengths and offsets allow can leave it: a wrong answer
is a finding, never a crash of the harness.

One case runs as: ferry.import_arrow, ferry.validate(full=True); if Ferry
calls it valid, the array, a random slice of it, its children and its
dictionary are exported from Ferry to pyarrow and checked with pyarrow's
validate(full=True). Ferry valid and pyarrow invalid is a mismatch. With
`stricter`, Ferry-invalid cases are also rebuilt and handed to pyarrow as
they are, to list where Ferry is stricter than Arrow C++.

Importing an invalid array can abort pyarrow (a map with null entries
does), so cases run in a worker process (`python cdata_fuzz.py worker ...`)
that prints one line per case; `run_cases` restarts the worker after a
crash and reports the case that crashed it.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import re
import subprocess
import sys
from dataclasses import dataclass, field

# ---- C Data structs ---------------------------------------------------------


class ArrowSchema(ctypes.Structure):
    pass


class ArrowArray(ctypes.Structure):
    pass


_SCHEMA_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowSchema))
_ARRAY_RELEASE = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowArray))
ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_char_p),
    ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowSchema))),
    ("dictionary", ctypes.POINTER(ArrowSchema)),
    ("release", _SCHEMA_RELEASE), ("private_data", ctypes.c_void_p),
]
ArrowArray._fields_ = [
    ("length", ctypes.c_int64), ("null_count", ctypes.c_int64), ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64), ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowArray))),
    ("dictionary", ctypes.POINTER(ArrowArray)),
    ("release", _ARRAY_RELEASE), ("private_data", ctypes.c_void_p),
]


# The producer keeps every byte alive in Python; release only marks the
# struct released (for the root and for any child a consumer moved out).
@_SCHEMA_RELEASE
def _release_schema(schema):
    schema.contents.release = _SCHEMA_RELEASE()


@_ARRAY_RELEASE
def _release_array(array):
    array.contents.release = _ARRAY_RELEASE()


_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

FLAG_NULLABLE = 2

# ---- Types --------------------------------------------------------------------


@dataclass
class Type:
    format: str
    children: list = field(default_factory=list)  # of (name, Type, flags)
    dictionary: "Type | None" = None  # value type; format is then the index type


# Not generated: interval[months] (tiM) and interval[day_time] (tiD), which
# pyarrow's Python layer cannot wrap, and run-end encoded values of a run-end
# encoded array, which Arrow C++'s C Data importer refuses (both are valid
# Arrow; Ferry's own tests cover them).
LEAF_FORMATS = ["n", "b", "c", "C", "s", "S", "i", "I", "l", "L", "e", "f", "g", "w:3",
                "tdD", "tdm", "tts", "ttm", "ttu", "ttn", "tss:", "tsu:UTC", "tDs", "tDn",
                "tin", "z", "Z", "u", "U", "vz", "vu"]
DECIMALS = [(32, 9), (64, 18), (128, 38), (256, 76)]
INDEX_FORMATS = ["c", "C", "s", "S", "i", "I", "l", "L"]
FIXED_WIDTH = {"c": 1, "C": 1, "s": 2, "S": 2, "i": 4, "I": 4, "l": 8, "L": 8, "e": 2, "f": 4,
               "g": 8, "w:3": 3, "tdD": 4, "tdm": 8, "tts": 4, "ttm": 4, "ttu": 8, "ttn": 8,
               "tss:": 8, "tsu:UTC": 8, "tDs": 8, "tDn": 8, "tin": 16}
TIME_PER_DAY = {"tts": 86400, "ttm": 86400 * 1000, "ttu": 86400 * 10**6, "ttn": 86400 * 10**9}


def random_type(rng: random.Random, depth: int = 0) -> Type:
    nested = depth < 3 and rng.random() < 0.45 - 0.1 * depth
    if not nested:
        if rng.random() < 0.12:
            bits, most = rng.choice(DECIMALS)
            precision = rng.randint(1, most)
            return Type(f"d:{precision},{rng.randint(0, precision)},{bits}")
        if rng.random() < 0.08:
            return Type(rng.choice(INDEX_FORMATS), dictionary=random_type(rng, depth + 1))
        return Type(rng.choice(LEAF_FORMATS))
    kind = rng.choice(["+l", "+L", "+vl", "+vL", "+w", "+s", "+m", "+ud", "+us", "+r"])
    child = lambda: random_type(rng, depth + 1)  # noqa: E731
    if kind in ("+l", "+L", "+vl", "+vL"):
        return Type(kind, [("item", child(), FLAG_NULLABLE)])
    if kind == "+w":
        return Type(f"+w:{rng.randint(0, 3)}", [("item", child(), FLAG_NULLABLE)])
    if kind == "+s":
        return Type("+s", [(f"f{i}", child(), FLAG_NULLABLE) for i in range(rng.randint(0, 3))])
    if kind == "+m":
        key = Type(rng.choice(["i", "u", "l", "z"]))
        entries = Type("+s", [("key", key, 0), ("value", child(), FLAG_NULLABLE)])
        return Type("+m", [("entries", entries, 0)])
    if kind in ("+ud", "+us"):
        count = rng.randint(1, 3)
        codes = sorted(rng.sample(range(8), count)) if rng.random() < 0.5 else list(range(count))
        return Type(f"{kind}:" + ",".join(map(str, codes)),
                    [(f"u{i}", child(), FLAG_NULLABLE) for i in range(count)])
    run_end = Type(rng.choice(["s", "i", "l"]))
    values = child()
    while values.format == "+r":
        values = child()
    return Type("+r", [("run_ends", run_end, 0), ("values", values, FLAG_NULLABLE)])


def has_validity(t: Type) -> bool:
    return t.format not in ("n", "+r") and not t.format.startswith(("+ud", "+us"))


# ---- Arrays ---------------------------------------------------------------------

SLACK_ELEMENTS = 8  # offset + length may grow by this much without leaving a buffer
SLACK_BYTES = 64


@dataclass
class Node:
    type: Type
    length: int
    offset: int
    null_count: int
    buffers: list  # bytearray or None, in C Data order (views: + variadic sizes)
    children: list = field(default_factory=list)
    dictionary: "Node | None" = None
    n_buffers: int | None = None  # a corrupted count; None = len(buffers)
    capacity: int = 0  # offset + length the buffers were made for
    data_size: int = 0  # binary/utf8: bytes allocated for the data buffer


def padded(data: bytes, minimum: int = 0) -> bytearray:
    out = bytearray(max(len(data), minimum) + SLACK_BYTES)
    out[: len(data)] = data
    return out


def element_buffer(values: bytes, width: int, end: int) -> bytearray:
    return padded(values, (end + SLACK_ELEMENTS + 1) * max(width, 1))


def pack(values, width: int, signed: bool = True) -> bytes:
    return b"".join(int(v).to_bytes(width, "little", signed=signed) for v in values)


def random_validity(rng, end: int, offset: int, length: int):
    """(bitmap or None, null_count as exported)."""
    if rng.random() < 0.45:
        return None, 0
    bits = [rng.random() < 0.75 for _ in range(end)]
    raw = bytearray((end + 7) // 8)
    for i, bit in enumerate(bits):
        if bit:
            raw[i // 8] |= 1 << (i % 8)
    nulls = sum(1 for i in range(offset, end) if not bits[i])
    return element_buffer(bytes(raw), 1, (end + 7) // 8), (nulls if rng.random() < 0.8 else -1)


def valid_slots(node: Node):
    bitmap = node.buffers[0] if has_validity(node.type) and node.buffers else None
    for i in range(node.offset, node.offset + node.length):
        if bitmap is None or bitmap[i // 8] >> (i % 8) & 1:
            yield i


UTF8_PIECES = ["a", "b", "z", "é", "ß", "€", "中", "😀", "", "xyzw"]


def random_bytes_value(rng, utf8: bool) -> bytes:
    if utf8:
        return "".join(rng.choice(UTF8_PIECES) for _ in range(rng.randint(0, 5))).encode()
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 14)))


def fixed_values(rng, fmt: str, count: int) -> bytes:
    width = FIXED_WIDTH[fmt]
    if fmt in TIME_PER_DAY:
        return pack([rng.randrange(TIME_PER_DAY[fmt]) for _ in range(count)], width)
    if fmt == "tdm":
        return pack([rng.randint(-20000, 20000) * 86400000 for _ in range(count)], 8)
    return bytes(rng.randrange(256) for _ in range(count * width))


def decimal_values(rng, precision: int, width: int, count: int) -> bytes:
    bound = 10**precision
    values = [rng.randrange(-bound + 1, bound) if rng.random() < 0.7
              else rng.choice([bound - 1, -(bound - 1), 0]) for _ in range(count)]
    return pack(values, width)


def random_array(rng, t: Type, length: int, depth: int = 0) -> Node:
    offset = rng.choice([0, 0, 0, 1, 2, 3])
    end = offset + length
    fmt = t.format
    node = Node(t, length, offset, 0, [], capacity=end)
    if has_validity(t):
        bitmap, node.null_count = random_validity(rng, end, offset, length)
        node.buffers.append(bitmap)
    if fmt == "n":
        node.null_count = length
    elif fmt == "b":
        node.buffers.append(element_buffer(bytes(rng.randrange(256) for _ in range((end + 7) // 8)),
                                           1, (end + 7) // 8))
    elif t.dictionary is not None:
        dictionary = random_array(rng, t.dictionary, rng.randint(1, 4), depth + 1)
        width = FIXED_WIDTH[fmt]
        node.buffers.append(element_buffer(
            pack([rng.randrange(dictionary.length) for _ in range(end)], width,
                 signed=fmt.islower()), width, end))
        node.dictionary = dictionary
    elif fmt in FIXED_WIDTH:
        node.buffers.append(element_buffer(fixed_values(rng, fmt, end), FIXED_WIDTH[fmt], end))
    elif fmt.startswith("d:"):
        precision, _scale, bits = (int(p) for p in fmt[2:].split(","))
        node.buffers.append(element_buffer(decimal_values(rng, precision, bits // 8, end),
                                           bits // 8, end))
    elif fmt in ("z", "Z", "u", "U"):
        width = 8 if fmt in ("Z", "U") else 4
        offsets, data = [0], b""
        for _ in range(end):
            data += random_bytes_value(rng, fmt in ("u", "U"))
            offsets.append(len(data))
        node.buffers.append(element_buffer(pack(offsets, width), width, end + 1))
        node.data_size = len(data) + SLACK_BYTES
        node.buffers.append(padded(data, node.data_size - SLACK_BYTES))
    elif fmt in ("vz", "vu"):
        data_buffers = [bytearray() for _ in range(rng.randint(0, 2))]
        views = b""
        for _ in range(end):
            value = random_bytes_value(rng, fmt == "vu")
            if len(value) > 12 and not data_buffers:
                value = value[:12]
            if len(value) <= 12:
                views += pack([len(value)], 4) + value + bytes(12 - len(value))
            else:
                index = rng.randrange(len(data_buffers))
                views += (pack([len(value)], 4) + value[:4] + pack([index], 4)
                          + pack([len(data_buffers[index])], 4))
                data_buffers[index] += value
        node.buffers.append(element_buffer(views, 16, end))
        node.buffers.extend(padded(bytes(b)) for b in data_buffers)
        node.buffers.append(padded(pack([len(b) for b in data_buffers], 8)))
    elif fmt in ("+l", "+L", "+m"):
        width = 8 if fmt == "+L" else 4
        offsets = [rng.randint(0, 2)]
        for _ in range(end):
            offsets.append(offsets[-1] + rng.randint(0, 3))
        node.buffers.append(element_buffer(pack(offsets, width), width, end + 1))
        child_length = offsets[-1] + rng.choice([0, 0, 1])
        if fmt == "+m":
            node.children.append(random_map_entries(rng, t.children[0][1], child_length, depth))
        else:
            node.children.append(random_array(rng, t.children[0][1], child_length, depth + 1))
    elif fmt in ("+vl", "+vL"):
        width = 8 if fmt == "+vL" else 4
        child_length = rng.randint(0, 6)
        starts = [rng.randint(0, child_length) for _ in range(end)]
        sizes = [rng.randint(0, child_length - s) for s in starts]
        node.buffers.append(element_buffer(pack(starts, width), width, end))
        node.buffers.append(element_buffer(pack(sizes, width), width, end))
        node.children.append(random_array(rng, t.children[0][1], child_length, depth + 1))
    elif fmt.startswith("+w:"):
        size = int(fmt[3:])
        node.children.append(random_array(rng, t.children[0][1], end * size, depth + 1))
    elif fmt == "+s":
        for _name, child_type, _flags in t.children:
            node.children.append(random_array(rng, child_type, end + rng.choice([0, 0, 1]),
                                              depth + 1))
    elif fmt.startswith(("+ud", "+us")):
        codes = [int(c) for c in fmt[4:].split(",")]
        type_ids = [rng.randrange(len(codes)) for _ in range(end)]
        node.buffers.append(element_buffer(bytes(codes[i] for i in type_ids), 1, end))
        if fmt.startswith("+us"):
            for _name, child_type, _flags in t.children:
                node.children.append(random_array(rng, child_type, end, depth + 1))
        else:
            counts = [0] * len(codes)
            offsets = []
            for child_index in type_ids:
                # Equal offsets in a row are allowed, decreasing ones are not.
                reuse = counts[child_index] > 0 and rng.random() < 0.2
                offsets.append(counts[child_index] - 1 if reuse else counts[child_index])
                counts[child_index] += 0 if reuse else 1
            node.buffers.append(element_buffer(pack(offsets, 4), 4, end))
            for (_name, child_type, _flags), count in zip(t.children, counts):
                node.children.append(random_array(rng, child_type, count + rng.choice([0, 0, 1]),
                                                  depth + 1))
    elif fmt == "+r":
        run_end_type, value_type = t.children[0][1], t.children[1][1]
        runs, total = [], 0
        while total < end or (not runs and rng.random() < 0.5):
            total += rng.randint(1, 3)
            runs.append(total)
        width = FIXED_WIDTH[run_end_type.format]
        run_ends = Node(run_end_type, len(runs), 0, 0,
                        [None, element_buffer(pack(runs, width), width, len(runs))],
                        capacity=len(runs))
        node.children = [run_ends, random_array(rng, value_type, len(runs), depth + 1)]
    else:
        raise AssertionError(fmt)
    return node


def random_map_entries(rng, entries_type: Type, length: int, depth: int) -> Node:
    """A map's entries struct: no nulls, and keys without nulls."""
    key_type, value_type = entries_type.children[0][1], entries_type.children[1][1]
    keys = random_array(rng, key_type, length, depth + 2)
    keys.buffers[0], keys.null_count = None, 0
    values = random_array(rng, value_type, length, depth + 2)
    return Node(entries_type, length, 0, 0, [None], [keys, values], capacity=length)


# ---- Corruptions --------------------------------------------------------------------


def nodes_of(node: Node, out=None):
    out = [] if out is None else out
    out.append(node)
    for child in node.children:
        nodes_of(child, out)
    if node.dictionary is not None:
        nodes_of(node.dictionary, out)
    return out


def is_binary_offsets(node: Node, index: int) -> bool:
    return node.type.format in ("z", "Z", "u", "U") and index == 1


def is_view_sizes(node: Node, index: int) -> bool:
    return node.type.format in ("vz", "vu") and index == len(node.buffers) - 1


def value_width(node: Node) -> int:
    """Bytes per element of buffer 1 where any value is safe to write; 0 if none."""
    fmt = node.type.format
    if len(node.buffers) < 2 or fmt in ("b", "z", "Z", "u", "U", "vz", "vu"):
        return 0
    if fmt in FIXED_WIDTH:
        return FIXED_WIDTH[fmt]
    if fmt.startswith("d:"):
        return int(fmt.split(",")[2]) // 8
    if fmt in ("+L", "+vL"):
        return 8
    if fmt in ("+l", "+m", "+vl") or fmt.startswith("+ud"):
        return 4
    return 0


BOUNDARY_VALUES = [-1, 0, 1, 2**31 - 1, -(2**31), 86400, 86400000, 86400 * 10**6,
                   86400 * 10**9, 201, 10**9, 10**18, 2**63 - 1, -(2**63)]


def corrupt(rng, root: Node) -> str:
    nodes = nodes_of(root)
    node = rng.choice(nodes)
    kind = rng.choice(["byte", "byte", "value", "value", "offset", "length", "null_count",
                       "null_buffer", "binary_offset", "variadic_size", "child_length",
                       "n_buffers", "view"])
    present = [i for i, b in enumerate(node.buffers) if b is not None]
    if kind == "byte" and present:
        index = rng.choice(present)
        if is_binary_offsets(node, index) or is_view_sizes(node, index):
            kind = "binary_offset" if is_binary_offsets(node, index) else "variadic_size"
        else:
            buffer = node.buffers[index]
            position = rng.randrange(max(1, len(buffer) - SLACK_BYTES))
            buffer[position] ^= 1 << rng.randrange(8)
            return f"byte of buffer {index} of {node.type.format}"
    width = value_width(node)
    if kind == "value" and width and node.buffers[1] is not None and node.length > 0:
        fmt = node.type.format
        slot = rng.randrange(node.offset, node.offset + node.length)
        if fmt.startswith("d:"):
            precision = int(fmt[2:].split(",")[0])
            value = rng.choice([10**precision, -(10**precision), 10**precision - 1])
            value = max(min(value, 2**(8 * width - 1) - 1), -(2**(8 * width - 1)))
        else:
            value = rng.choice(BOUNDARY_VALUES)
        value &= (1 << (8 * min(width, 8))) - 1
        node.buffers[1][slot * width: slot * width + min(width, 8)] = \
            value.to_bytes(min(width, 8), "little")
        return f"value of {fmt}"
    if kind == "offset":
        node.offset = max(-1, node.offset + rng.choice([-1, 1, 2, 5]))
        node.offset = min(node.offset, node.capacity + SLACK_ELEMENTS - node.length)
        return "offset"
    if kind == "length":
        node.length = max(0, node.length + rng.choice([-2, -1, 1, 2, 3]))
        node.length = min(node.length, node.capacity + SLACK_ELEMENTS - max(node.offset, 0))
        return "length"
    if kind == "null_count":
        node.null_count = rng.randint(-1, node.length + 1)
        return "null_count"
    if kind == "null_buffer" and present:
        index = rng.choice(present)
        if not is_view_sizes(node, index):
            node.buffers[index] = None
            return f"NULL buffer {index}"
    if kind == "binary_offset" and node.type.format in ("z", "Z", "u", "U") and \
            node.buffers[1] is not None:
        width = 8 if node.type.format in ("Z", "U") else 4
        slot = rng.randrange(0, node.offset + node.length + 1)
        value = rng.randint(-2, node.data_size)
        node.buffers[1][slot * width:(slot + 1) * width] = value.to_bytes(width, "little",
                                                                          signed=True)
        return "binary offset"
    if kind == "variadic_size" and node.type.format in ("vz", "vu") and len(node.buffers) > 3:
        index = rng.randrange(len(node.buffers) - 3)
        data = node.buffers[2 + index]
        limit = len(data) if data is not None else 0
        node.buffers[-1][index * 8:(index + 1) * 8] = rng.randint(0, limit).to_bytes(8, "little")
        return "variadic size"
    if kind == "child_length" and node.children:
        child = rng.choice(node.children)
        child.length = max(0, child.length + rng.choice([-2, -1, 1]))
        child.length = min(child.length, child.capacity + SLACK_ELEMENTS - max(child.offset, 0))
        return "child length"
    if kind == "n_buffers" and node.type.format not in ("vz", "vu"):
        node.n_buffers = max(0, len(node.buffers) + rng.choice([-1, 1]))
        return "n_buffers"
    if kind == "view" and node.type.format in ("vz", "vu") and node.length > 0 \
            and node.buffers[1] is not None:
        slot = rng.randrange(node.offset, node.offset + node.length)
        view = node.buffers[1]
        part = rng.choice([0, 4, 8, 12])
        view[slot * 16 + part: slot * 16 + part + 4] = rng.choice(
            [-1, 0, 1, 5, 13, 40, 2**31 - 1]).to_bytes(4, "little", signed=True)
        return "view field"
    return "none"


# ---- Building the C structs ---------------------------------------------------------


class Built:
    """Owns every ctypes object of one case's C structs."""

    def __init__(self):
        self.keep = []

    def schema(self, t: Type, name: str = "x", flags: int = FLAG_NULLABLE) -> ArrowSchema:
        schema = ArrowSchema()
        schema.format = t.format.encode()
        schema.name = name.encode()
        schema.flags = flags
        if t.dictionary is not None:
            value = self.schema(t.dictionary, "dictionary")
            schema.dictionary = ctypes.pointer(value)
        if t.children:
            pointers = (ctypes.POINTER(ArrowSchema) * len(t.children))()
            for i, (child_name, child_type, child_flags) in enumerate(t.children):
                pointers[i] = ctypes.pointer(self.schema(child_type, child_name, child_flags))
            schema.children = pointers
            schema.n_children = len(t.children)
            self.keep.append(pointers)
        schema.release = _release_schema
        self.keep.append(schema)
        return schema

    def array(self, node: Node) -> ArrowArray:
        array = ArrowArray()
        array.length, array.null_count, array.offset = node.length, node.null_count, node.offset
        count = node.n_buffers if node.n_buffers is not None else len(node.buffers)
        pointers = (ctypes.c_void_p * (len(node.buffers) + 2))()
        for i, buffer in enumerate(node.buffers):
            if buffer is not None:
                memory = (ctypes.c_char * len(buffer)).from_buffer(buffer)
                self.keep.append(memory)
                pointers[i] = ctypes.addressof(memory)
        array.n_buffers = count
        array.buffers = pointers
        self.keep.append(pointers)
        if node.children:
            children = (ctypes.POINTER(ArrowArray) * len(node.children))()
            for i, child in enumerate(node.children):
                children[i] = ctypes.pointer(self.array(child))
            array.children = children
            array.n_children = len(node.children)
            self.keep.append(children)
        if node.dictionary is not None:
            array.dictionary = ctypes.pointer(self.array(node.dictionary))
        array.release = _release_array
        self.keep.append(array)
        return array


class Producer:
    """An object with __arrow_c_array__ over raw C structs."""

    def __init__(self, t: Type, node: Node):
        self.built = Built()
        self.c_schema = self.built.schema(t)
        self.c_array = self.built.array(node)

    def __arrow_c_array__(self, requested_schema=None):
        return (_new_capsule(ctypes.addressof(self.c_schema), b"arrow_schema", None),
                _new_capsule(ctypes.addressof(self.c_array), b"arrow_array", None))


def make_case(seed: int, index: int):
    """(type, node, corruptions) of case `index`; the same for the same pair."""
    rng = random.Random(seed * 1_000_003 + index)
    t = random_type(rng)
    node = random_array(rng, t, rng.choice([0, 1, 2, 3, 5, 8]))
    corruptions = []
    if rng.random() < 0.7:
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            corruptions.append(corrupt(rng, node))
    return t, node, corruptions, rng


def describe_type(t: Type) -> str:
    if t.dictionary is not None:
        return f"dict<{t.format}, {describe_type(t.dictionary)}>"
    if not t.children:
        return t.format
    return t.format + "<" + ", ".join(describe_type(c) for _n, c, _f in t.children) + ">"


def rule_of(message: str) -> str:
    """The rule a Ferry error names, numbers dropped: 'path: rule: detail'."""
    parts = message.split(": ")
    rule = parts[1] if len(parts) > 1 else parts[0]
    return re.sub(r"-?\d+", "N", rule)


# ---- One case ------------------------------------------------------------------------


def run_case(seed: int, index: int, stricter: bool, emit) -> None:
    t, node, corruptions, rng = make_case(seed, index)
    producer = Producer(t, node)  # owns the memory: outlives every array below
    try:
        _check_case(seed, index, stricter, emit, t, corruptions, rng, producer)
    finally:
        del producer


def _check_case(seed, index, stricter, emit, t, corruptions, rng, producer):
    import ferry
    import pyarrow as pa

    base = {"case": index, "type": describe_type(t), "corruptions": corruptions}
    try:
        imported = ferry.import_arrow(producer)
        ferry.validate(imported, full=True)
    except ValueError as error:
        result = dict(base, verdict="ferry_invalid", rule=rule_of(str(error)),
                      message=str(error))
        if stricter:
            # The same case rebuilt and given to pyarrow as it is.
            t, node, _c, _r = make_case(seed, index)
            fresh = Producer(t, node)
            emit({"begin": index})
            try:
                array = pa.Array._import_from_c_capsule(*fresh.__arrow_c_array__())
                array.validate(full=True)
                result["pyarrow"] = "valid"
                del array
            except Exception as error:  # noqa: BLE001 - any refusal counts
                result["pyarrow"] = "invalid: " + str(error).splitlines()[0][:200]
        emit(result)
        return
    # Ferry certified it: the array, a slice, its children and its dictionary
    # go to pyarrow through Ferry's export.
    targets = [("array", imported)]
    if len(imported) > 0:
        start = rng.randrange(len(imported) + 1)
        targets.append(("slice", imported.slice(start, rng.randrange(len(imported) - start + 1))))
    for i, child in enumerate(imported.children):
        targets.append((f"child {i}", child))
    if imported.dictionary is not None:
        targets.append(("dictionary", imported.dictionary))
    emit({"begin": index})
    for what, target in targets:
        try:
            ferry.validate(target, full=True)
        except ValueError as error:
            emit(dict(base, verdict="EXPORT_INVALID", part=what, message=str(error)))
            return
        try:
            array = pa.Array._import_from_c_capsule(*target.__arrow_c_array__())
            array.validate(full=True)
        except Exception as error:  # noqa: BLE001
            emit(dict(base, verdict="MISMATCH", part=what,
                      message=str(error).splitlines()[0][:300]))
            return
    emit(dict(base, verdict="both_valid"))


def worker(seed: int, start: int, count: int, stricter: bool) -> None:
    def emit(record):
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()

    for index in range(start, start + count):
        run_case(seed, index, stricter, emit)


# ---- Driver ---------------------------------------------------------------------------


@dataclass
class Summary:
    cases: int = 0
    ferry_invalid: int = 0
    both_valid: int = 0
    failures: list = field(default_factory=list)  # MISMATCH, EXPORT_INVALID, crashes
    stricter: dict = field(default_factory=dict)  # rule -> [count, example]
    ferry_invalid_rules: dict = field(default_factory=dict)  # rule -> count
    pyarrow_crashes: int = 0  # Ferry-invalid cases pyarrow aborted on (stricter mode)


def run_cases(seed: int, count: int, stricter: bool = False, env=None) -> Summary:
    """Runs cases [0, count) of `seed` in worker processes."""
    summary = Summary()
    here = os.path.abspath(__file__)
    next_index = 0
    while next_index < count:
        process = subprocess.Popen(
            [sys.executable, here, "worker", str(seed), str(next_index), str(count - next_index),
             "1" if stricter else "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        begun = None
        for line in process.stdout:
            record = json.loads(line)
            if "begin" in record:
                begun = record["begin"]
                continue
            begun = None
            next_index = record["case"] + 1
            summary.cases += 1
            verdict = record["verdict"]
            if verdict == "ferry_invalid":
                summary.ferry_invalid += 1
                rule = record["rule"]
                summary.ferry_invalid_rules[rule] = summary.ferry_invalid_rules.get(rule, 0) + 1
                if record.get("pyarrow") == "valid":
                    entry = summary.stricter.setdefault(rule, [0, record])
                    entry[0] += 1
            elif verdict == "both_valid":
                summary.both_valid += 1
            else:
                summary.failures.append(record)
        stderr = process.stderr.read()
        code = process.wait()
        if code != 0:
            crashed = begun if begun is not None else next_index
            t, _node, corruptions, _rng = make_case(seed, crashed)
            summary.cases += 1
            if stricter and begun is not None and _ferry_refuses(seed, crashed):
                summary.pyarrow_crashes += 1
                summary.ferry_invalid += 1
            else:
                summary.failures.append({
                    "case": crashed, "verdict": "CRASH", "type": describe_type(t),
                    "corruptions": corruptions, "exit": code,
                    "message": stderr.strip().splitlines()[-1:] or ""})
            next_index = crashed + 1
    return summary


def _ferry_refuses(seed: int, index: int) -> bool:
    """Whether Ferry refused case `index` (asked in a fresh process)."""
    code = ("import sys; sys.path[:0] = %r; import cdata_fuzz, ferry\n"
            "t, n, c, r = cdata_fuzz.make_case(%d, %d)\n"
            "try:\n"
            "    ferry.validate(ferry.import_arrow(cdata_fuzz.Producer(t, n)), full=True)\n"
            "    print('valid')\n"
            "except ValueError:\n"
            "    print('invalid')\n") % (_SEARCH_PATH, seed, index)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return out.stdout.strip() == "invalid"


# This directory and the checkout's python/ (the ferry package).
_SEARCH_PATH = [os.path.dirname(os.path.abspath(__file__)),
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")]

def main(argv) -> int:
    """`run [--seed S] [--cases N] [--stricter]`: a long run, summarised."""
    import argparse
    import time

    parser = argparse.ArgumentParser(prog="cdata_fuzz.py run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=100000)
    parser.add_argument("--stricter", action="store_true",
                        help="also give Ferry-invalid cases to pyarrow, to list where "
                             "Ferry is stricter")
    args = parser.parse_args(argv)
    started = time.monotonic()
    summary = run_cases(args.seed, args.cases, stricter=args.stricter)
    elapsed = time.monotonic() - started
    print(f"seed {args.seed}: {summary.cases} cases in {elapsed:.1f} s; Ferry valid and "
          f"pyarrow valid {summary.both_valid}, Ferry invalid {summary.ferry_invalid}, "
          f"failures {len(summary.failures)}")
    rules = sorted(summary.ferry_invalid_rules.items(), key=lambda item: -item[1])
    print("Ferry's most frequent refusals:")
    for rule, count in rules[:15]:
        print(f"  {count:7d}  {rule}")
    if args.stricter:
        print(f"Ferry stricter than pyarrow (pyarrow crashed on {summary.pyarrow_crashes} "
              "Ferry-invalid cases):")
        for rule, (count, example) in sorted(summary.stricter.items(), key=lambda i: -i[1][0]):
            print(f"  {count:7d}  {rule}  (e.g. case {example['case']}, {example['type']})")
    for failure in summary.failures[:20]:
        print("FAILURE", json.dumps(failure))
    return 1 if summary.failures else 0


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "worker":
    sys.path[:0] = _SEARCH_PATH
    worker(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1")
elif __name__ == "__main__" and len(sys.argv) >= 2 and sys.argv[1] == "run":
    sys.exit(main(sys.argv[2:]))
