# SPDX-License-Identifier: MIT
"""safetensors dtypes -> what DLPack carries and what each framework gets.

DLPack 0.6 (Debian's dlpack.h, what torch 1.13 and numpy 1.24 read) has no
bool, fp8 or sub-byte codes: those travel as bytes (uint8) and torch
re-types them with .view(dtype) where it knows the dtype. numpy gets BF16 as
uint16, fp8 and BOOL as uint8 / bool; sub-byte dtypes (F4, F6_*) reach both
as the raw bytes, shape [nbytes].
"""
# DLPack codes (dlpack.h)
INT, UINT, FLOAT, BFLOAT, COMPLEX = 0, 1, 2, 4, 5

# name: (element bits, DLPack code, DLPack bits, torch dtype name after the
# view or None, numpy dtype name)
TABLE = {
    "BOOL": (8, UINT, 8, "bool", "bool"),
    "U8": (8, UINT, 8, None, "uint8"),
    "I8": (8, INT, 8, None, "int8"),
    "I16": (16, INT, 16, None, "int16"),
    "U16": (16, INT, 16, "uint16", "uint16"),
    "I32": (32, INT, 32, None, "int32"),
    "U32": (32, INT, 32, "uint32", "uint32"),
    "I64": (64, INT, 64, None, "int64"),
    "U64": (64, INT, 64, "uint64", "uint64"),
    "F16": (16, FLOAT, 16, None, "float16"),
    "BF16": (16, BFLOAT, 16, None, "uint16"),
    "F32": (32, FLOAT, 32, None, "float32"),
    "F64": (64, FLOAT, 64, None, "float64"),
    "C64": (64, COMPLEX, 64, None, "complex64"),
    "F8_E4M3": (8, UINT, 8, "float8_e4m3fn", "uint8"),
    "F8_E5M2": (8, UINT, 8, "float8_e5m2", "uint8"),
    "F8_E8M0": (8, UINT, 8, "float8_e8m0fnu", "uint8"),
    # sub-byte: bytes only
    "F4": (4, UINT, 8, None, "uint8"),
    "F6_E2M3": (6, UINT, 8, None, "uint8"),
    "F6_E3M2": (6, UINT, 8, None, "uint8"),
}
SUB_BYTE = ("F4", "F6_E2M3", "F6_E3M2")


def element_bytes(dtype):
    """Bytes per element, or None for sub-byte dtypes."""
    bits = TABLE[dtype][0]
    return bits // 8 if bits % 8 == 0 else None


def dlpack_for(dtype, framework):
    """(code, bits) to put in the DLManagedTensor for framework."""
    _, code, bits, _, npname = TABLE[dtype]
    if framework == "numpy":
        # numpy reads no bfloat; unsigned and signed of one width are
        # what numpy's own name says
        if dtype == "BF16":
            return UINT, 16
        if npname.startswith("uint"):
            return UINT, bits
    return code, bits


def torch_dtype(dtype, torch):
    """The torch dtype a served tensor of dtype gets (after any .view), or
    raises TypeError naming what this torch lacks."""
    _, code, bits, after, _ = TABLE[dtype]
    if dtype in SUB_BYTE:
        return torch.uint8
    if after is None:
        return {
            (INT, 8): torch.int8, (UINT, 8): torch.uint8,
            (INT, 16): torch.int16, (INT, 32): torch.int32,
            (INT, 64): torch.int64, (FLOAT, 16): torch.float16,
            (FLOAT, 32): torch.float32, (FLOAT, 64): torch.float64,
            (BFLOAT, 16): torch.bfloat16, (COMPLEX, 64): torch.complex64,
        }[(code, bits)]
    t = getattr(torch, after, None)
    if t is None:
        raise TypeError("wcache: the served dtype %s needs torch.%s, which torch %s "
                        "lacks; use framework='numpy' or a newer torch"
                        % (dtype, after, torch.__version__))
    return t
