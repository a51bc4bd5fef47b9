"""FileCheck over the CUDA target's stages (model.ir("gpu" | "nvvm" | "ptx")): the kernel families
with their shapes baked in, bare-pointer kernel arguments after NVVM conversion, and PTX 8.0 whose
math comes from libdevice (linked, so no `__nv_` call is left) with vectorized weight loads."""

import os
import shutil
import subprocess

import pytest

import gpt


def filecheck() -> str:
    for candidate in ("external/llvm/bin/FileCheck", "/usr/lib/llvm-19/bin/FileCheck"):
        if os.path.exists(candidate):
            return candidate
    return shutil.which("FileCheck-19") or "FileCheck"


def check(text: str, checks: str, tmp_path) -> None:
    path = tmp_path / "checks.txt"
    path.write_text(checks)
    result = subprocess.run([filecheck(), str(path)], input=text, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def model():
    config = gpt.GPTConfig(n_layer=1, n_head=2, n_embd=64, vocab_size=100, block_size=32)
    return gpt.GPT.random(config)


def test_gpu_stage_has_every_family_with_static_shapes(model, tmp_path):
    check(
        model.ir("gpu", seq_len=16),
        """
CHECK: gpu.container_module
CHECK: gpu.module @kernels
CHECK: gpu.func @gather_0(%table: memref<6400xf32>, %ids: memref<16xi64>,
CHECK-SAME: %table2: memref<2048xf32>, %ids2: memref<16xi64>, %out: memref<1024xf32>) kernel
CHECK: gpu.func @layer_norm_0(%in: memref<1024xf32>, %weight: memref<64xf32>, %bias: memref<64xf32>,
CHECK-SAME: %out: memref<1024xf32>) workgroup
CHECK: gpu.shuffle xor
CHECK: math.rsqrt
CHECK: gpu.func @matmul_0(%a: memref<1024xf32>, %b: memref<12288xf32>, %bias: memref<192xf32>, %out: memref<3072xf32>)
CHECK-SAME: workgroup(%as: memref<16x64xf32, #gpu.address_space<workgroup>>
CHECK: memref.assume_alignment %b, 16
CHECK: gpu.barrier
CHECK: vector.fma
CHECK: gpu.func @attention_0(
CHECK: math.exp
CHECK: gpu.func @matmul_2(
CHECK: math.tanh
CHECK: gpu.func @cache_write_0(%update: {{.*}}, %offset: memref<1xi64>, %cache: memref<2048xf32>) kernel
CHECK: gpu.func @matvec_0(
""",
        tmp_path,
    )


def test_bf16_weights_are_widened_in_registers(model, tmp_path):
    from gpt import gpu_export

    text = gpu_export.compile_artifact(model, "cuda:sm_90", (1,), "bf16")["gpu"]
    check(
        text,
        """
CHECK: gpu.func @matvec_0(%a: memref<64xf32>, %b: memref<12288xi16>
CHECK: vector.load %b[{{.*}}] : memref<12288xi16>, vector<8xi16>
CHECK: arith.extui {{.*}} : vector<8xi16> to vector<8xi32>
CHECK: arith.shli
CHECK: arith.bitcast {{.*}} : vector<8xi32> to vector<8xf32>
""",
        tmp_path,
    )


def test_matvec_has_four_loads_in_flight_per_lane_then_a_tail(tmp_path):
    """The decode step's matvec streams its weight column with four 16-byte loads per lane issued
    before the first FMA (over the largest multiple of 512 values), then single loads to the end.
    Width 160: the down projection's depth is 640, one unrolled trip and a tail."""
    from gpt import gpu_export

    model = gpt.GPT.random(gpt.GPTConfig(n_layer=1, n_head=2, n_embd=160, vocab_size=100, block_size=32))
    check(
        gpu_export.compile_artifact(model, "cuda:sm_90", (1,), "f32")["gpu"],
        """
CHECK: gpu.func @matvec_3(%a: memref<640xf32>, %b: memref<102400xf32>
CHECK: scf.for %k = %[[START:.*]] to %c512 step %c512 iter_args(%a0 = %{{.*}}) -> (vector<4xf32>)
CHECK-NOT: vector.fma
CHECK: vector.load %b[{{.*}}] : memref<102400xf32>, vector<4xf32>
CHECK-NOT: vector.fma
CHECK: vector.load %b[{{.*}}] : memref<102400xf32>, vector<4xf32>
CHECK-NOT: vector.fma
CHECK: vector.load %b[{{.*}}] : memref<102400xf32>, vector<4xf32>
CHECK-NOT: vector.fma
CHECK: vector.load %b[{{.*}}] : memref<102400xf32>, vector<4xf32>
CHECK-NOT: vector.fma
CHECK: vector.load %a[{{.*}}] : memref<640xf32>, vector<4xf32>
CHECK-NEXT: vector.fma {{.*}}, %a0 : vector<4xf32>
CHECK-COUNT-3: vector.fma
CHECK-NEXT: scf.yield
CHECK: %[[TAIL:.*]] = arith.addi %[[START]], %c512 : index
CHECK: scf.for %k = %[[TAIL]] to %c640 step %c128 iter_args(%a0 = %acc{{[0-9]+}}#0)
CHECK: gpu.func @matvec_4(
""",
        tmp_path,
    )


def test_nvvm_stage_takes_bare_pointers(model, tmp_path):
    check(
        model.ir("nvvm"),
        """
CHECK: gpu.module @kernels [#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80",
CHECK-SAME: link = [{{.*}}libdevice.10.bc"]>]
CHECK: llvm.func @gather_0(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: !llvm.ptr, %arg3: !llvm.ptr, %arg4: !llvm.ptr)
CHECK-SAME: attributes {gpu.kernel, nvvm.kernel}
CHECK: nvvm.shfl.sync bfly
CHECK: nvvm.barrier0
""",
        tmp_path,
    )


def test_ptx_stage_links_libdevice_and_vectorizes_weight_loads(model, tmp_path):
    ptx = model.ir("ptx", target="cuda:sm_80")
    check(
        ptx,
        """
CHECK: .version 8.0
CHECK: .target sm_80
CHECK: .address_size 64
CHECK: .visible .entry gather_0(
CHECK: .visible .entry matvec_0(
CHECK: ld.global.v4.f32
CHECK: shfl.sync.bfly.b32
CHECK-NOT: __nv_
""",
        tmp_path,
    )


def test_no_kernel_spills_registers(tmp_path):
    """ptxas -v over GPT-2 small's kernels (f32 and bf16): every one fits its registers, so no
    kernel pays for local-memory spills."""
    from gpt import cuda_tools, gpu_export

    config = gpt.GPTConfig(n_layer=1, n_head=12, n_embd=768, vocab_size=50257, block_size=1024)
    model = gpt.GPT.random(config)
    for weights in ("f32", "bf16"):
        path = tmp_path / f"{weights}.ptx"
        path.write_text(gpu_export.compile_artifact(model, "cuda:sm_90", (1, 128), weights)["ptx"])
        result = subprocess.run(
            [cuda_tools.ptxas_path(), "-v", "-arch=sm_90", str(path), "-o", os.devnull],
            capture_output=True,
            text=True,
            check=True,
        )
        reports = [line for line in result.stderr.splitlines() if "spill stores" in line]
        assert len(reports) >= 8
        assert all(" 0 bytes spill stores, 0 bytes spill loads" in line for line in reports), result.stderr
