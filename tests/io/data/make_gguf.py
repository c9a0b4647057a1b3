"""Writes the reference .gguf files of test_io (tests/io/test_gguf.cpp) with the `gguf`
Python package (llama.cpp's own writer), and beside each quantized tensor the values the
package's `quants.dequantize` gives for it, so that rlx's reader and dequantizer are checked
against code they share nothing with.

    pip install gguf==0.19.0 numpy
    python3 tests/io/data/make_gguf.py     # rewrites tests/io/data/gguf/

Files:
- every_type.gguf: metadata of every value type (nested arrays included) and one tensor per
  type rlx dequantizes: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (quantized from random
  normal values with quants.quantize), Q4_K, Q5_K, Q6_K (random blocks with finite f16
  scales: the package has no quantizer for them), and a rank-3 and a rank-1 tensor.
  <tensor>.npy holds each tensor's dequantized values (f32, in the numpy shape, which is
  rlx's row-major order).
- align64.gguf: general.alignment = 64 with tensors whose sizes are not multiples of 64.

Made with gguf 0.19.0 and numpy 2.4.6.
"""
import os

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType, GGUFWriter, quants
from gguf.constants import GGML_QUANT_SIZES

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gguf")
rng = np.random.default_rng(18)


def random_k_blocks(qtype, rows, cols):
    """Raw blocks of random bytes whose f16 scales are finite (any sign, subnormals too)."""
    block, size = GGML_QUANT_SIZES[qtype]
    n = rows * cols // block
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    scales = {Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [size - 2]}[qtype]
    for at in scales:
        bits = rng.integers(0, 0x7C00, size=n, dtype=np.uint16) | (rng.integers(0, 2, size=n, dtype=np.uint16) << 15)
        raw[:, at : at + 2] = bits.view(np.uint8).reshape(n, 2)
    return raw.reshape(rows, cols // block * size)


def every_type():
    w = GGUFWriter(os.path.join(HERE, "every_type.gguf"), "rlxtest")
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_uint64("test.u64", 2**64 - 1)
    w.add_int64("test.i64", -(2**63))
    w.add_float32("test.f32", 0.1)
    w.add_float64("test.f64", -1e300)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "h\u00e9llo")
    w.add_array("test.array_i32", [1, -2, 3])
    w.add_array("test.array_string", ["a", "", "\u00fcber"])
    w.add_array("test.array_nested", [[1, 2], [3]])
    w.add_key_value("test.array_f32", [0.5, -1.5], GGUFValueType.ARRAY,
                    sub_type=GGUFValueType.FLOAT32)

    tensors = {}
    x = rng.standard_normal((3, 64)).astype(np.float32)
    tensors["f32"] = (x, None)
    tensors["f16"] = (x.astype(np.float16), None)
    tensors["bf16"] = (quants.quantize(x, Q.BF16), Q.BF16)
    for name, qt in [("q8_0", Q.Q8_0), ("q4_0", Q.Q4_0), ("q4_1", Q.Q4_1), ("q5_0", Q.Q5_0), ("q5_1", Q.Q5_1)]:
        tensors[name] = (quants.quantize(rng.standard_normal((3, 64)).astype(np.float32), qt), qt)
    for name, qt in [("q4_k", Q.Q4_K), ("q5_k", Q.Q5_K), ("q6_k", Q.Q6_K)]:
        tensors[name] = (random_k_blocks(qt, 2, 512), qt)
    tensors["q8_0_rank3"] = (quants.quantize(rng.standard_normal((2, 3, 32)).astype(np.float32), Q.Q8_0), Q.Q8_0)
    tensors["f32_rank1"] = (np.arange(5, dtype=np.float32) - 2.5, None)

    for name, (data, qt) in tensors.items():
        w.add_tensor(name, data, raw_dtype=qt)
        if qt is None:
            expect = data.astype(np.float32)
        else:
            expect = quants.dequantize(data, qt)
        np.save(os.path.join(HERE, name + ".npy"), np.ascontiguousarray(expect, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def align64():
    w = GGUFWriter(os.path.join(HERE, "align64.gguf"), "rlxtest")
    w.add_custom_alignment(64)
    w.add_tensor("a", np.arange(3, dtype=np.float32))
    w.add_tensor("b", quants.quantize(np.linspace(-1, 1, 32, dtype=np.float32), Q.Q8_0), raw_dtype=Q.Q8_0)
    w.add_tensor("c", np.array([[1, 2], [3, 4], [5, 6]], np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    os.makedirs(HERE, exist_ok=True)
    with np.errstate(over="ignore"):
        every_type()
    align64()
