#!/usr/bin/env python3
"""Reads TensorBoard event files without TensorFlow, TensorBoard or protobuf.

Written from the formats, independently of dslaunch's writer: the TFRecord
framing (length, masked CRC-32C of the length, data, masked CRC-32C of the
data) and the protobuf wire format of tensorflow.Event and Summary. Every
CRC is checked; a bad one is an error naming the file and offset.

  read_tfevents.py FOLDER [--purge]

prints one JSON object per event, in file-name order then file order:
  {"file": ..., "wall_time": ..., "step": ..., "file_version": ...}
  {"file": ..., "step": ..., "session_log": "START"}
  {"file": ..., "step": ..., "scalars": {"tag": value, ...}}
With --purge, applies TensorBoard's rule for restarts: a SessionLog START at
step s drops every scalar event read before it with step >= s; then prints
what is left.
"""
import glob
import json
import os
import struct
import sys

_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, pos):
    value, shift = 0, 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def fields(buf):
    """(field number, wire type, value) for each field of a message."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported wire type %d" % wire)
        yield number, wire, value


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise ValueError("%s: truncated record header at offset %d" % (path, pos))
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if length_crc != masked(header):
            raise ValueError("%s: bad length CRC at offset %d" % (path, pos))
        body = data[pos + 12:pos + 12 + length]
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if len(body) != length or body_crc != masked(body):
            raise ValueError("%s: bad data CRC at offset %d" % (path, pos))
        yield body
        pos += 16 + length


def event(path, body):
    out = {"file": os.path.basename(path), "step": 0}
    for number, wire, value in fields(body):
        if number == 1 and wire == 1:
            out["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            out["step"] = value
        elif number == 3 and wire == 2:
            out["file_version"] = value.decode()
        elif number == 5 and wire == 2:
            scalars = {}
            for n, w, v in fields(value):
                if n != 1 or w != 2:
                    continue
                tag, simple = None, None
                for vn, vw, vv in fields(v):
                    if vn == 1 and vw == 2:
                        tag = vv.decode()
                    elif vn == 2 and vw == 5:
                        simple = struct.unpack("<f", vv)[0]
                scalars[tag] = simple
            out["scalars"] = scalars
        elif number == 6 and wire == 2:
            status = dict((n, v) for n, w, v in fields(value) if w == 0).get(1, 0)
            out["session_log"] = {0: "UNSPECIFIED", 1: "START", 2: "STOP", 3: "CHECKPOINT"}[status]
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    purge = "--purge" in sys.argv[2:]
    files = sorted(glob.glob(os.path.join(sys.argv[1], "*tfevents*")))
    if not files:
        sys.exit("no event files in %s" % sys.argv[1])
    events = []
    for path in files:
        for body in records(path):
            e = event(path, body)
            if purge and e.get("session_log") == "START":
                events = [x for x in events if "scalars" not in x or x["step"] < e["step"]]
            events.append(e)
    for e in events:
        print(json.dumps(e, sort_keys=True))


if __name__ == "__main__":
    main()
