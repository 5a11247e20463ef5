"""The few protobuf wire-format pieces the client needs, in plain Python.

Messages are built as lists of (field number, value) and read back as
{field number: [values]}; integers are varints (negative ones as 10-byte
two's complement, as protobuf writes int32/int64), str and bytes are
length-delimited, a nested message is bytes from encode(), and a float is
a double (fixed 64-bit, little-endian).
"""
import struct


def _varint(value):
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode(fields):
    """fields: iterable of (number, value); None values and proto3 defaults are skipped."""
    out = bytearray()
    for number, value in fields:
        if value is None:
            continue
        if isinstance(value, bool):
            if value:
                out += _varint(number << 3) + _varint(1)
        elif isinstance(value, int):
            if value:
                out += _varint(number << 3) + _varint(value)
        elif isinstance(value, float):
            if value:
                out += _varint((number << 3) | 1) + struct.pack("<d", value)
        else:
            if isinstance(value, str):
                value = value.encode()
            if value:
                out += _varint((number << 3) | 2) + _varint(len(value)) + bytes(value)
    return bytes(out)


def _read_varint(buf, pos):
    value, shift = 0, 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def decode(buf):
    """{number: [values]}: varints as int, length-delimited fields as bytes."""
    fields = {}
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
            if value >= 1 << 63:
                value -= 1 << 64
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            value, pos = bytes(buf[pos:pos + length]), pos + length
        elif wire == 1:
            value, pos = bytes(buf[pos:pos + 8]), pos + 8
        elif wire == 5:
            value, pos = bytes(buf[pos:pos + 4]), pos + 4
        else:
            raise ValueError("protobuf wire type %d is not supported" % wire)
        fields.setdefault(number, []).append(value)
    return fields


def first(fields, number, default):
    values = fields.get(number)
    return values[-1] if values else default
