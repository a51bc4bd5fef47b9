"""memrefCopy of gpt/_gpt_program_support.so (cc/runtime/support/MemrefCopy.cpp), called as compiled
programs call it (an element size and two unranked memrefs), against numpy's own copy of the same
strided views."""

import ctypes
import os

import numpy as np
import pytest

import gpt

LIBRARY = os.path.join(os.path.dirname(gpt._gpt.__file__), "_gpt_program_support.so")


class Unranked(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int64), ("descriptor", ctypes.c_void_p)]


def descriptor(view, base):
    """The ranked descriptor of `view`, a strided view into `base`: allocated and aligned pointers,
    the offset, sizes and strides in elements."""
    item = view.itemsize
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    fields = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64] + [ctypes.c_int64] * (2 * view.ndim)
    struct_type = type("Descriptor", (ctypes.Structure,), {"_fields_": [(f"f{i}", t) for i, t in enumerate(fields)]})
    address = base.__array_interface__["data"][0]
    values = [address, address, offset, *view.shape, *(s // item for s in view.strides)]
    return struct_type(*values)


def memref_copy(source_view, source_base, target_view, target_base):
    library = ctypes.CDLL(LIBRARY)
    source, target = descriptor(source_view, source_base), descriptor(target_view, target_base)
    library.memrefCopy(
        ctypes.c_int64(source_view.itemsize),
        ctypes.byref(Unranked(source_view.ndim, ctypes.cast(ctypes.pointer(source), ctypes.c_void_p))),
        ctypes.byref(Unranked(target_view.ndim, ctypes.cast(ctypes.pointer(target), ctypes.c_void_p))),
    )


CASES = {
    "contiguous 2-D": (lambda a: a[:, :], lambda b: b[:, :], (6, 8), (6, 8)),
    "rows of a wider matrix into a narrower one": (lambda a: a[1:5, 2:7], lambda b: b[:, 1:6], (6, 9), (4, 7)),
    "transposed source (inner stride not 1)": (lambda a: a.T, lambda b: b, (5, 7), (7, 5)),
    "every other element, both sides": (lambda a: a[:, ::2], lambda b: b[::2, ::3], (4, 12), (8, 18)),
    "a KV cache's head slice, 3-D": (lambda a: a[:, 2:5, :], lambda b: b[1:, 3:6, :], (3, 8, 16), (4, 9, 16)),
    "4-D with a reversed-order view": (lambda a: a.transpose(1, 0, 2, 3), lambda b: b, (2, 3, 4, 5), (3, 2, 4, 5)),
    "1-D": (lambda a: a[3:11], lambda b: b[::2], (16,), (16,)),
    "rank 0": (lambda a: a, lambda b: b, (), ()),
    "empty": (lambda a: a[:, :0], lambda b: b[:, :0], (3, 4), (3, 4)),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint16])
def test_memref_copy_writes_exactly_the_target_view(case, dtype):
    pick_source, pick_target, source_shape, target_shape = CASES[case]
    rng = np.random.default_rng(len(case))
    source_base = rng.integers(0, 1000, size=source_shape).astype(dtype)
    target_base = np.full(target_shape, 7, dtype=dtype)
    expected = target_base.copy()
    source_view, target_view = np.asarray(pick_source(source_base)), np.asarray(pick_target(target_base))
    np.asarray(pick_target(expected))[...] = pick_source(source_base)
    memref_copy(source_view, source_base, target_view, target_base)
    np.testing.assert_array_equal(target_base, expected)  # the view written, nothing else
