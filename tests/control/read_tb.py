#!/usr/bin/python3
"""An independent reader of TensorBoard event files: TFRecord framing with masked CRC32C
(computed here bit by bit, not with baton's code) and Event/Summary messages decoded with
python3-protobuf from descriptors built at run time (TensorFlow's field numbers, no protoc).

    read_tb.py TB_DIR [METRICS_JSONL]

Reads the event files of TB_DIR in name order, as TensorBoard's EventAccumulator does with
purge_orphaned_data: an Event with session_log START at step S (a restart) drops every
scalar read before of step >= S. A scalar of a tag at a step it already holds, with no
restart marker between, is an error (TensorBoard would draw both).

Prints "tag step value" per scalar kept and "session_log START S" per restart marker. With
METRICS_JSONL, checks that every line's loss, lr, grad_norm and tokens_per_s are in the
event files at its global_step (as float32)."""
import glob
import json
import math
import os
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from crc32c import crc32c  # noqa: E402


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="tb_reader.proto", package="tbr", syntax="proto3")

    def msg(name, fields, oneofs=()):
        m = fd.message_type.add(name=name)
        for o in oneofs:
            m.oneof_decl.add(name=o)
        for fname, num, ftype, label, tname, oneof in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = tname
            if oneof is not None:
                f.oneof_index = oneof
    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    msg("Value", [("tag", 1, F.TYPE_STRING, opt, None, None),
                  ("simple_value", 2, F.TYPE_FLOAT, opt, None, 0)], ["value"])
    msg("Summary", [("value", 1, F.TYPE_MESSAGE, rep, ".tbr.Value", None)])
    # TensorFlow event.proto: session_log is field 7 (6 is the deprecated log_message).
    # SessionLog.status is an enum in event.proto (START = 1); an enum is a varint on the
    # wire, read here as int32
    msg("SessionLog", [("status", 1, F.TYPE_INT32, opt, None, None),
                       ("checkpoint_path", 2, F.TYPE_STRING, opt, None, None),
                       ("msg", 3, F.TYPE_STRING, opt, None, None)])
    msg("Event", [("wall_time", 1, F.TYPE_DOUBLE, opt, None, None),
                  ("step", 2, F.TYPE_INT64, opt, None, None),
                  ("file_version", 3, F.TYPE_STRING, opt, None, 0),
                  ("summary", 5, F.TYPE_MESSAGE, opt, ".tbr.Summary", 0),
                  ("session_log", 7, F.TYPE_MESSAGE, opt, ".tbr.SessionLog", 0)], ["what"])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("tbr.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def records(path):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        if len(data) - at < 12:
            sys.exit(f"{path}: truncated record header at byte {at}")
        (n,) = struct.unpack_from("<Q", data, at)
        (hcrc,) = struct.unpack_from("<I", data, at + 8)
        if hcrc != masked(data[at:at + 8]):
            sys.exit(f"{path}: bad length CRC at byte {at}")
        body = data[at + 12:at + 12 + n]
        if len(body) != n or len(data) < at + 16 + n:
            sys.exit(f"{path}: truncated record at byte {at}")
        (dcrc,) = struct.unpack_from("<I", data, at + 12 + n)
        if dcrc != masked(body):
            sys.exit(f"{path}: bad data CRC at byte {at}")
        yield body
        at += 16 + n


def main():
    files = sorted(glob.glob(sys.argv[1] + "/events.out.tfevents.*"))
    if not files:
        sys.exit(f"no event file in {sys.argv[1]}")
    Event = event_class()
    scalars = {}
    for path in files:
        for i, body in enumerate(records(path)):
            ev = Event.FromString(body)
            if i == 0:
                if ev.WhichOneof("what") != "file_version" or ev.file_version != "brain.Event:2":
                    sys.exit(f"{path}: the first record is not file_version brain.Event:2")
                continue
            if ev.WhichOneof("what") == "session_log":
                if ev.session_log.status == 1:  # START: a restart at ev.step
                    scalars = {k: x for k, x in scalars.items() if k[1] < ev.step}
                    print("session_log START", ev.step)
                continue
            if ev.WhichOneof("what") != "summary":
                sys.exit(f"{path}: record {i} is neither a summary nor a session log")
            for v in ev.summary.value:
                if v.WhichOneof("value") != "simple_value":
                    sys.exit(f"{path}: record {i}: {v.tag} has no simple_value")
                if (v.tag, ev.step) in scalars:
                    sys.exit(f"{path}: record {i}: {v.tag} at step {ev.step} a second time "
                             "without a restart marker (session_log START) before it")
                scalars[(v.tag, ev.step)] = v.simple_value
    for (tag, step), x in sorted(scalars.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(tag, step, x)
    if len(sys.argv) > 2:
        check(scalars, sys.argv[2])


def check(scalars, jsonl):
    f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
    n = 0
    for line in open(jsonl):
        m = json.loads(line)
        for key in ("loss", "lr", "grad_norm", "tokens_per_s"):
            got = scalars.get(("train/" + key, m["global_step"]))
            if m[key] is None:  # metrics.jsonl writes a non-finite number as null
                if got is None or math.isfinite(got):
                    sys.exit(f"train/{key} at step {m['global_step']}: {got}, metrics.jsonl null")
            elif got is None or got != f32(m[key]):
                sys.exit(f"train/{key} at step {m['global_step']}: {got}, metrics.jsonl {m[key]}")
        n += 1
    if n == 0:
        sys.exit(f"{jsonl} is empty")
    print(f"tensorboard: {n} step(s) of metrics.jsonl found in the event files, CRCs good")


main()
