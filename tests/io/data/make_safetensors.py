"""Writes the reference .safetensors files of test_io (tests/io/test_safetensors.cpp) with
Hugging Face's own `safetensors` package, so that rlx's reader is checked against files it
did not write. The values are chosen to be exact in their dtype (extremes, signed zero,
subnormals, inf, NaN); the C++ test spells the same values out.

    pip install safetensors numpy
    python3 tests/io/data/make_safetensors.py     # rewrites the files beside this script

Made with safetensors 0.8.0 and numpy 2.4.6.
"""
import math
import os

import numpy as np
import safetensors
from safetensors import TensorSpec
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))


def every_dtype():
    """One tensor per dtype; bf16 and f8 (no NumPy type) go in as their bit patterns."""
    arrays = {
        "bool": (np.array([True, False, True, True, False]), "bool"),
        "u8": (np.array([[0, 1, 2], [127, 128, 255]], np.uint8), "uint8"),
        "i8": (np.array([-128, -1, 0, 1, 2, 127], np.int8), "int8"),
        "i16": (np.array([-32768, -1, 0, 32767], np.int16), "int16"),
        "u16": (np.array([0, 1, 65535], np.uint16), "uint16"),
        "i32": (np.array([[-(2**31), -1], [0, 2**31 - 1]], np.int32), "int32"),
        "u32": (np.array([0, 2**32 - 1], np.uint32), "uint32"),
        "i64": (np.array([-(2**63), 0, 2**63 - 1], np.int64), "int64"),
        "u64": (np.array([0, 2**64 - 1], np.uint64), "uint64"),
        "f16": (np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 2.0**-24, np.inf, np.nan], np.float16), "float16"),
        "bf16": (np.array([[0x3F80, 0xC020, 0x7F7F], [0x0001, 0xFF80, 0x7FC0]], np.uint16), "bfloat16"),
        "f32": (np.array([[0.5, -1.25, 3.4028234663852886e38], [2.0**-149, -0.0, 1.0 / 3.0]], np.float32), "float32"),
        "f64": (np.array([0.1, -1e300, 5e-324, math.pi], np.float64), "float64"),
        "c64": (np.array([1 + 2j, -0.5 - 0.25j], np.complex64), "complex64"),
        "f8_e4m3": (np.array([0x00, 0x38, 0x7E, 0xFF], np.uint8), "float8_e4m3fn"),
    }
    specs = {
        name: TensorSpec(dtype=dtype, shape=a.shape, data_ptr=a.ctypes.data, data_len=a.nbytes)
        for name, (a, dtype) in arrays.items()
    }
    meta = {"format": "np", "made_by": "tests/io/data/make_safetensors.py"}
    safetensors.serialize_file(specs, os.path.join(HERE, "every_dtype.safetensors"), metadata=meta)


def numpy_api():
    """Through the package's NumPy front end, the way most files are made."""
    save_file(
        {
            "scalar": np.array(2.5, np.float32),
            "empty": np.zeros((0, 3), np.float32),
            "counts": np.arange(6, dtype=np.int64).reshape(2, 3),
            "weight": (np.arange(12, dtype=np.float32) - 5.5).reshape(3, 4) / 4,
        },
        os.path.join(HERE, "numpy_api.safetensors"),
        metadata={"step": "100", "note": "line 1\nline 2 \u00e9"},
    )


if __name__ == "__main__":
    every_dtype()
    numpy_api()
