#!/usr/bin/python3
"""Reads TensorBoard event files without TensorFlow or rlmesh code: checks the TFRecord framing
(both masked CRC-32C of every record, computed with Debian's crcmod) and decodes the protocol
buffer wire format of tensorflow.Event by hand. Prints one JSON object:
{"files": N, "file_version": "...", "scalars": {"<step>": {"<tag>": value, ...}, ...}}.
Exits 1 naming the file and the byte offset of the first record that does not check out.

Usage: read_tensorboard_events.py FOLDER_OR_FILE ...
"""
import json
import math
import os
import struct
import sys

import crcmod.predefined

CRC32C = crcmod.predefined.mkCrcFun("crc-32c")


def masked(data):
    crc = CRC32C(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, pos):
    value, shift = 0, 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def fields(buf):
    """(field number, wire type, value) of a message; value is bytes, int or raw fixed bytes."""
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
            raise ValueError("wire type %d" % wire)
        yield number, wire, value


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        header = data[pos:pos + 8]
        if len(header) < 8 or len(data) < pos + 12:
            raise ValueError("%s: record at byte %d is cut short" % (path, pos))
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if length_crc != masked(header):
            raise ValueError("%s: length CRC of the record at byte %d does not match" % (path, pos))
        body = data[pos + 12:pos + 12 + length]
        tail = data[pos + 12 + length:pos + 16 + length]
        if len(body) < length or len(tail) < 4:
            raise ValueError("%s: record at byte %d is cut short" % (path, pos))
        if struct.unpack("<I", tail)[0] != masked(body):
            raise ValueError("%s: data CRC of the record at byte %d does not match" % (path, pos))
        yield body
        pos += 16 + length


def main(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, n) for n in os.listdir(p) if "tfevents" in n)
        else:
            files.append(p)
    out = {"files": len(files), "file_version": None, "scalars": {}}
    for path in files:
        for body in records(path):
            step, values = 0, {}
            for number, wire, value in fields(body):
                if number == 2 and wire == 0:  # step (int64)
                    step = value - (1 << 64) if value >= 1 << 63 else value
                elif number == 3 and wire == 2:  # file_version
                    out["file_version"] = value.decode()
                elif number == 5 and wire == 2:  # summary
                    for n, w, v in fields(value):
                        if n != 1 or w != 2:
                            continue
                        tag, simple = None, None
                        for n2, w2, v2 in fields(v):
                            if n2 == 1 and w2 == 2:
                                tag = v2.decode()
                            elif n2 == 2 and w2 == 5:
                                (simple,) = struct.unpack("<f", v2)
                        if tag is not None and simple is not None:
                            values[tag] = None if not math.isfinite(simple) else simple
            if values:
                out["scalars"].setdefault(str(step), {}).update(values)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except ValueError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
