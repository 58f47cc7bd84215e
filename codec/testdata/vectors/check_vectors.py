#!/usr/bin/env python3
"""Checks the stored test vectors against an implementation written from
DESIGN.md ("3LC, exactly") and the frame layout of codec/src/frame.rs, in
plain Python with no third-party packages, sharing nothing with the Rust code.

f32 arithmetic is emulated by computing each +, -, *, / in Python's binary64
and rounding the result to binary32 (struct 'f'). For these operations on f32
inputs that double rounding is exact: 53 >= 2*24 + 2 bits.

Usage: python3 check_vectors.py [directory]   (default: this file's directory)
Exits non-zero on the first mismatch.
"""

import math
import os
import re
import struct
import sys

STEPS = 3


def f32(x):
    """Rounds a Python float to the nearest f32 (infinity on overflow)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f32_from_bits(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


# --- the inputs (tests/common/mod.rs: formula, sparse_formula) ---


def formula(n, t):
    out = []
    for i in range(n):
        if (i * 5 + t * 3) % 7 < 3:
            out.append(0.0)
        else:
            k = (i * 37 + t * 11 + 5) % 23 - 11
            out.append(k * k * k / 4096.0)
    return out


def sparse_formula(n, t):
    dense = formula(n, t)
    return [dense[i] if i % 31 < 8 and (i * 13 + t * 7) % 5 != 0 else 0.0 for i in range(n)]


# --- frames ---

CODEC_IDS = {"none": 0, "fp16": 1, "bf16": 2, "int8": 3, "terngrad": 4, "onebit": 5, "topk": 6, "3lc": 7}


def frame(codec, feedback, n, params, payload):
    body = b"TLCF" + bytes([1, CODEC_IDS[codec], 1, 1 if feedback else 0])
    body += struct.pack("<QIB", n, len(payload), len(params)) + params + payload
    return body + struct.pack("<I", crc32c(body))


def pack_f32(values):
    return struct.pack("<%df" % len(values), *values)


def quartic(q):
    n = len(q)
    l = (n + 4) // 5
    t = [v + 1 for v in q] + [1] * (5 * l - n)
    return bytes(81 * t[i] + 27 * t[l + i] + 9 * t[2 * l + i] + 3 * t[3 * l + i] + t[4 * l + i] for i in range(l))


def zero_run(b):
    out = bytearray()
    i = 0
    while i < len(b):
        if b[i] != 121:
            out.append(b[i])
            i += 1
            continue
        k = 0
        while i + k < len(b) and b[i + k] == 121:
            k += 1
        i += k
        while k > 0:
            piece = min(k, 14)
            out.append(121 if piece == 1 else 243 + piece - 2)
            k -= piece
    return bytes(out)


def bitmap(bits):
    out = bytearray((len(bits) + 7) // 8)
    for i, bit in enumerate(bits):
        if bit:
            out[i // 8] |= 1 << (i % 8)
    return bytes(out)


# --- codecs: each takes acc and returns (params, payload, sent values) ---


def enc_3lc(acc, s, _):
    m = f32(max((abs(a) for a in acc), default=0.0) * s)
    q = [0 if m == 0 else round(f32(a / m)) for a in acc]  # round(): ties to even
    assert all(v in (-1, 0, 1) for v in q)
    sent = [f32(m * v) for v in q]
    return pack_f32([m, s]), zero_run(quartic(q)), sent


def enc_none(acc, _s, _):
    return b"", pack_f32(acc), list(acc)


def enc_fp16(acc, _s, _):
    # struct 'e' rounds to nearest even (and raises on overflow).
    payload = b"".join(struct.pack("<e", a) for a in acc)
    sent = list(struct.unpack("<%de" % len(acc), payload))
    return b"", payload, sent


def enc_bf16(acc, _s, _):
    words, sent = [], []
    for a in acc:
        b = f32_bits(a)
        upper, lower = b >> 16, b & 0xFFFF
        if lower > 0x8000 or (lower == 0x8000 and upper & 1):
            upper += 1
        words.append(upper)
        sent.append(f32_from_bits(upper << 16))
    return b"", struct.pack("<%dH" % len(words), *words), sent


def enc_int8(acc, _s, _):
    step = f32(max((abs(a) for a in acc), default=0.0) / 127.0)
    levels = []
    for a in acc:
        if step == 0:
            q = 0 if a == 0 else int(math.copysign(127, a))  # a/0: NaN -> 0, +-inf -> clamp
        else:
            q = max(-127, min(127, round(f32(a / step))))
        levels.append(q)
    sent = [f32(q * step) for q in levels]
    return pack_f32([step]), bytes(q & 0xFF for q in levels), sent


M64 = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def enc_terngrad(acc, seed, frame_index):
    key = mix64(seed ^ mix64((frame_index + 0x9E3779B97F4A7C15) & M64))
    scale = max((abs(a) for a in acc), default=0.0)
    q = []
    for i, a in enumerate(acc):
        u = (mix64((key + i * 0x9E3779B97F4A7C15) & M64) >> 40) * 2.0**-24
        q.append((1 if a > 0 else -1) if f32(u * scale) < abs(a) else 0)
    sent = [f32(v * scale) for v in q]
    return pack_f32([scale]), quartic(q), sent


def enc_onebit(acc, _s, _):
    pos = [a for a in acc if a >= 0]
    neg = [a for a in acc if a < 0]

    def mean(v):
        total = 0.0
        for a in v:  # f64 sum in order, as the encoder does
            total += a
        return f32(total / len(v)) if v else 0.0

    p, m = mean(pos), mean(neg)
    return pack_f32([p, m]), bitmap([a >= 0 for a in acc]), [p if a >= 0 else m for a in acc]


def enc_topk(acc, percent, _):
    n = len(acc)
    assert n <= 4096  # small tensors: the threshold comes from all magnitudes
    if percent >= 100 or n == 0:
        thr = 0.0
    else:
        keep = max(1, math.ceil(n * percent / 100.0))
        thr = sorted(abs(a) for a in acc)[n - keep]
    kept = [a != 0 and abs(a) >= thr for a in acc]
    values = [a for a, k in zip(acc, kept) if k]
    params = struct.pack("<fI", percent, len(values))
    return params, bitmap(kept) + pack_f32(values), [a if k else 0.0 for a, k in zip(acc, kept)]


ENCODERS = {
    "3lc": enc_3lc,
    "none": enc_none,
    "fp16": enc_fp16,
    "bf16": enc_bf16,
    "int8": enc_int8,
    "terngrad": enc_terngrad,
    "onebit": enc_onebit,
    "topk": enc_topk,
}

NAME = re.compile(r"^(none|fp16|bf16|int8|onebit|3lc_s([0-9.]+)|terngrad_seed(\d+)|topk_k([0-9.]+))_(fb|nofb)(_sparse)?$")


def check(directory, name):
    match = NAME.match(name)
    if not match:
        raise SystemExit(f"{name}: cannot read the settings from the name")
    codec = match.group(1).split("_")[0]
    if codec == "3lc":
        setting = f32(float(match.group(2)))
    elif codec == "terngrad":
        setting = int(match.group(3))
    elif codec == "topk":
        setting = f32(float(match.group(4)))
    else:
        setting = None
    feedback = match.group(5) == "fb"
    sparse = match.group(6) is not None

    def read(ext):
        with open(os.path.join(directory, f"{name}.{ext}"), "rb") as f:
            return f.read()

    stored_in, stored_frames, stored_out = read("in.f32"), read("frames"), read("out.f32")
    n = len(stored_in) // 4 // STEPS
    xs = [(sparse_formula if sparse else formula)(n, t) for t in range(STEPS)]
    if pack_f32([v for x in xs for v in x]) != stored_in:
        raise SystemExit(f"{name}: stored input is not the formula's")

    e = [0.0] * n
    frames, out = b"", []
    for t, x in enumerate(xs):
        acc = [f32(a + b) for a, b in zip(x, e)] if feedback else list(x)
        params, payload, sent = ENCODERS[codec](acc, setting, t)
        if feedback:
            e = [f32(a - s) for a, s in zip(acc, sent)]
        frames += frame(codec, feedback, n, params, payload)
        out += sent
    if frames != stored_frames:
        at = next((i for i, (a, b) in enumerate(zip(frames, stored_frames)) if a != b), min(len(frames), len(stored_frames)))
        raise SystemExit(f"{name}: frames differ at byte {at} (python {len(frames)} bytes, stored {len(stored_frames)})")
    if pack_f32(out) != stored_out:
        raise SystemExit(f"{name}: decoded output differs")
    return len(frames)


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    names = sorted(f[: -len(".in.f32")] for f in os.listdir(directory) if f.endswith(".in.f32"))
    if not names:
        raise SystemExit(f"no vectors in {directory}")
    for name in names:
        size = check(directory, name)
        print(f"ok  {name}  ({size} frame bytes)")
    print(f"{len(names)} vectors match")


if __name__ == "__main__":
    main()
