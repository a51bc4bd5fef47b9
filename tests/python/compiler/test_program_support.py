"""What compiled programs call in gpt/_gpt_program_support.so, called as they call it: memrefCopy
(cc/runtime/support/MemrefCopy.cpp; an element size and two unranked memrefs) against numpy's own
copy of the same strided views, and the workspace that is their heap (Workspace.cpp)."""

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


def workspace():
    library = ctypes.CDLL(LIBRARY)
    library._mlir_memref_to_llvm_alloc.restype = ctypes.c_void_p
    library._mlir_memref_to_llvm_alloc.argtypes = [ctypes.c_size_t]
    library._mlir_memref_to_llvm_aligned_alloc.restype = ctypes.c_void_p
    library._mlir_memref_to_llvm_aligned_alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
    library._mlir_memref_to_llvm_free.argtypes = [ctypes.c_void_p]
    library.gpt_workspace_release.restype = ctypes.c_size_t
    library.gpt_workspace_kept_bytes.restype = ctypes.c_size_t
    return library


def test_the_workspace_hands_a_large_block_to_the_next_allocation_of_its_size():
    """cc/runtime/support/Workspace.cpp, the heap of compiled programs: a freed block of 1 MiB or
    more is kept and handed to the next request of the same size (a prefill's temporaries, every
    call), aligned as asked; small blocks and blocks of other sizes are not; release frees them."""
    library = workspace()
    library.gpt_workspace_release()
    large = 8 << 20
    first = library._mlir_memref_to_llvm_alloc(large)
    assert first % 64 == 0
    ctypes.memset(first, 0x5A, large)  # the whole request is writable
    library._mlir_memref_to_llvm_free(first)
    assert library.gpt_workspace_kept_bytes() >= large
    assert library._mlir_memref_to_llvm_alloc(large + 4096) != first  # another size: a block of its own
    again = library._mlir_memref_to_llvm_alloc(large)
    assert again == first and library.gpt_workspace_kept_bytes() == 0
    library._mlir_memref_to_llvm_free(again)

    small = library._mlir_memref_to_llvm_alloc(1000)
    library._mlir_memref_to_llvm_free(small)
    aligned = library._mlir_memref_to_llvm_aligned_alloc(4096, large)
    assert aligned % 4096 == 0
    library._mlir_memref_to_llvm_free(aligned)
    library._mlir_memref_to_llvm_free(None)  # as free(NULL)
    kept = library.gpt_workspace_kept_bytes()
    assert kept >= 2 * large  # the two large blocks, not the small one
    assert library.gpt_workspace_release() == kept and library.gpt_workspace_kept_bytes() == 0


def test_the_workspace_keeps_no_more_than_a_gibibyte():
    library = workspace()
    library.gpt_workspace_release()
    blocks = [library._mlir_memref_to_llvm_alloc(300 << 20) for _ in range(4)]
    assert all(blocks)
    for block in blocks:
        library._mlir_memref_to_llvm_free(block)
    assert library.gpt_workspace_kept_bytes() <= 1 << 30
    library.gpt_workspace_release()
