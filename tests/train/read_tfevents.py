#!/usr/bin/env python3
"""Independent reader of TensorBoard event files for ctune's tests, written from the format's
specification (TFRecord: uint64 length, uint32 masked CRC-32C of the length bytes, the data,
uint32 masked CRC-32C of the data; masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8 mod 2^32;
CRC-32C is CRC-32 with the Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78) and from
tensorflow/core/util/event.proto and summary.proto (Event: wall_time = 1 double, step = 2 int64,
file_version = 3 string, summary = 5; Summary: repeated Value value = 1; Value: tag = 1 string,
simple_value = 2 float). It shares no code with ctune and checks every checksum strictly.

Usage: read_tfevents.py DIR  ->  JSON on stdout:
  {"files": [{"name": ..., "file_version": ..., "events": [{"step", "wall_time", "values": {tag: v}}]}]}
Exit status 1 with a message when a file is malformed (bad CRC, torn record, bad protobuf).
"""
import json
import os
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    """(field number, wire type, value) of a protobuf message; value is int, bytes or raw bytes."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        if i > len(buf):
            raise ValueError("field runs past the message")
        yield number, wire, value


def varint(buf, i):
    value, shift = 0, 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def read_file(path):
    data = open(path, "rb").read()
    out = {"name": os.path.basename(path), "file_version": None, "events": []}
    at = 0
    while at < len(data):
        if at + 12 > len(data):
            raise ValueError(f"{path}: torn record header at byte {at}")
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        if length_crc != masked(header):
            raise ValueError(f"{path}: bad length CRC at byte {at}")
        if at + 16 + length > len(data):
            raise ValueError(f"{path}: torn record at byte {at}")
        body = data[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if data_crc != masked(body):
            raise ValueError(f"{path}: bad data CRC at byte {at}")
        at += 16 + length
        event = {"step": 0, "wall_time": None, "values": {}}
        for number, wire, value in fields(body):
            if number == 1 and wire == 1:
                (event["wall_time"],) = struct.unpack("<d", value)
            elif number == 2 and wire == 0:
                event["step"] = value
            elif number == 3 and wire == 2:
                out["file_version"] = value.decode()
            elif number == 5 and wire == 2:
                for n, w, v in fields(value):
                    if n != 1 or w != 2:
                        continue
                    tag, simple = None, None
                    for vn, vw, vv in fields(v):
                        if vn == 1 and vw == 2:
                            tag = vv.decode()
                        elif vn == 2 and vw == 5:
                            (simple,) = struct.unpack("<f", vv)
                    event["values"][tag] = simple
        if event["values"]:
            out["events"].append(event)
    return out


def main():
    d = sys.argv[1]
    names = sorted(n for n in os.listdir(d) if n.startswith("events.out.tfevents."))
    try:
        files = [read_file(os.path.join(d, n)) for n in names]
    except ValueError as e:
        print(f"read_tfevents: {e}", file=sys.stderr)
        sys.exit(1)
    json.dump({"files": files}, sys.stdout)


main()
