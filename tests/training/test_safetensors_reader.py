#!/usr/bin/env python3
"""Independent reader test: hvd's safetensors files open with the Python `safetensors` package.

Usage: test_safetensors_reader.py WRITER OUT_DIR
Runs WRITER OUT_DIR (tests/training/test_safetensors_writer.cc), then reads its files with the
reference implementation (safetensors.numpy.load_file, safetensors.deserialize, safe_open) and
compares every tensor with values computed here, independently of the C++ side. It also checks
hvd's checksum with a pure-Python XXH64 and the canonical encoding documented in
training/safetensors.h.
Exits 77 (ctest SKIP_RETURN_CODE) when numpy or safetensors is not installed; install them with
    python3 -m pip install safetensors numpy
"""
import os
import subprocess
import sys

try:
    import numpy as np
    import safetensors
    from safetensors import safe_open
    from safetensors.numpy import load_file
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIP: the independent reader needs numpy and safetensors ({e}); "
          "install them with: python3 -m pip install safetensors numpy")
    sys.exit(77)

M = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def _round(acc, lane):
    return (_rotl((acc + lane * P2) & M, 31) * P1) & M


def xxh64(data, seed=0):
    n, p = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M]
        while p + 32 <= n:
            for i in range(4):
                v[i] = _round(v[i], int.from_bytes(data[p + 8 * i:p + 8 * i + 8], "little"))
            p += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M
        for lane in v:
            h = ((h ^ _round(0, lane)) * P1 + P4) & M
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while p + 8 <= n:
        h ^= _round(0, int.from_bytes(data[p:p + 8], "little"))
        h = (_rotl(h, 27) * P1 + P4) & M
        p += 8
    if p + 4 <= n:
        h ^= (int.from_bytes(data[p:p + 4], "little") * P1) & M
        h = (_rotl(h, 23) * P2 + P3) & M
        p += 4
    while p < n:
        h ^= (data[p] * P5) & M
        h = (_rotl(h, 11) * P1) & M
        p += 1
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    h ^= h >> 32
    return h


WEIRD = 'weird \u00fc "q" \\ name/\u00e9'
METADATA = {"note": 'quote " backslash \\ newline \n tab \t \u00e9 \u20ac', "ctrl": "\x01\x1f", "step": "12"}


def expected_numpy():
    """The tensors test_safetensors_writer writes, computed independently."""
    j = np.arange
    return {
        "u8": ((7 * j(15) + 3) % 256).astype(np.uint8).reshape(3, 5),
        "i8": ((5 * j(17)) % 256 - 128).astype(np.int8),
        "i32": (j(24) * 7919 - 123456).astype(np.int32).reshape(2, 3, 4),
        "i64": j(5, dtype=np.int64) * 3000000000 - 7,
        "f16": np.array([1.0, -2.0, 0.5, 65504.0], dtype=np.float16),
        "f32": ((j(105) - 50) * 0.25).astype(np.float32).reshape(3, 5, 7),
        "f64": j(6) / 3.0,
        "scalar": np.array(42.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "one": np.array([-1], dtype=np.int64),
        WEIRD: np.array([1, 2], dtype=np.uint8),
    }


def bf16_bytes(values):
    bits = np.array(values, dtype=np.float32).view(np.uint32) >> 16
    return bits.astype("<u2").tobytes()


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def compare_arrays(got, expected, where):
    check(set(got) == set(expected), f"{where}: names {sorted(got)} != {sorted(expected)}")
    for name, exp in expected.items():
        if name not in got:
            continue
        g = got[name]
        check(g.dtype == exp.dtype, f"{where}: {name!r} dtype {g.dtype} != {exp.dtype}")
        check(g.shape == exp.shape, f"{where}: {name!r} shape {g.shape} != {exp.shape}")
        check(np.array_equal(g, exp), f"{where}: {name!r} values {g!r} != {exp!r}")


def verify_checksum(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little")
    import json
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__")
    canon = b"hvd-safetensors-checksum-v1\n"
    entries = sorted(header.items(), key=lambda kv: (kv[1]["data_offsets"][0], kv[1]["data_offsets"][1], kv[0].encode()))
    for name, e in entries:
        nb = name.encode()
        shape = "[" + ",".join(str(d) for d in e["shape"]) + "]"
        b, en = e["data_offsets"]
        canon += b"t %d:%s %s %s %d %d\n" % (len(nb), nb, e["dtype"].encode(), shape.encode(), b, en)
    for k in sorted(meta, key=lambda s: s.encode()):
        if k == "checksum":
            continue
        kb, vb = k.encode(), meta[k].encode()
        canon += b"m %d:%s %d:%s\n" % (len(kb), kb, len(vb), vb)
    digest = "%016x" % xxh64(canon + blob[8 + n:])
    check(meta.get("checksum_algorithm") == "xxh64-v1", f"{path}: checksum_algorithm {meta.get('checksum_algorithm')}")
    check(meta.get("checksum") == digest, f"{path}: checksum {meta.get('checksum')} != recomputed {digest}")
    check((8 + n) % 8 == 0, f"{path}: header not 8-byte aligned ({n})")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    writer, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    subprocess.run([writer, out], check=True)
    print("safetensors", safetensors.__version__, "numpy", np.__version__)

    check(xxh64(b"") == 0xEF46DB3751D8E999 and xxh64(b"abc") == 0x44BC2CF5AD770999, "pure-Python xxh64 self-test")

    expected = expected_numpy()
    numpy_path, all_path = os.path.join(out, "numpy.safetensors"), os.path.join(out, "all.safetensors")

    # 1. The high-level numpy loader.
    compare_arrays(load_file(numpy_path), expected, "load_file")

    # 2. safe_open: metadata, and tensors one by one.
    with safe_open(numpy_path, framework="numpy") as f:
        meta = f.metadata()
        for k, v in METADATA.items():
            check(meta.get(k) == v, f"metadata {k!r}: {meta.get(k)!r} != {v!r}")
        check(set(f.keys()) == set(expected), f"safe_open keys {sorted(f.keys())}")
        check(np.array_equal(f.get_tensor("f64"), expected["f64"]), "safe_open f64")

    # 3. The reference parser on the file with BF16 (numpy has no bfloat16): raw bytes per tensor.
    with open(all_path, "rb") as fh:
        parsed = dict(safetensors.deserialize(fh.read()))
    want = {name: (arr.dtype, list(arr.shape), arr.astype(arr.dtype.newbyteorder("<")).tobytes())
            for name, arr in expected.items()}
    dtype_names = {np.uint8: "U8", np.int8: "I8", np.int32: "I32", np.int64: "I64",
                   np.float16: "F16", np.float32: "F32", np.float64: "F64"}
    want = {n: (dtype_names[d.type], s, b) for n, (d, s, b) in want.items()}
    want["bf16"] = ("BF16", [2, 2], bf16_bytes([1.5, -1.0, 0.0, 3.0]))
    check(set(parsed) == set(want), f"deserialize names {sorted(parsed)}")
    for name, (dt, shape, data) in want.items():
        if name in parsed:
            got = parsed[name]
            check(got["dtype"] == dt, f"deserialize {name!r} dtype {got['dtype']} != {dt}")
            check(list(got["shape"]) == shape, f"deserialize {name!r} shape {got['shape']} != {shape}")
            check(bytes(got["data"]) == data, f"deserialize {name!r} bytes differ")

    # 4. hvd's checksum, recomputed independently.
    verify_checksum(numpy_path)
    verify_checksum(all_path)

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("OK: the Python safetensors package reads hvd's files with the expected values")
    return 0


if __name__ == "__main__":
    sys.exit(main())
