"""Kernel names for synthetic reports: a few hundred distinct kernels that look like real ones.

PyTorch elementwise, reduction and softmax templates in their Itanium-mangled forms (demangled by
gpuscope's own demangler, so a name that does not demangle is a bug here), cuBLAS ``sm80_xmma_*``
and ``nvjet_sm90_*`` GEMMs, NCCL device kernels and Triton kernels. :func:`build_names` mixes them
in fixed shares; the same generator state gives the same names in the same order.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from gpuscope.trace.demangle import demangle


@dataclass(frozen=True)
class KernelName:
    """One distinct kernel: its mangled and demangled names and what kind of kernel it is."""

    mangled: str
    demangled: str
    family: str


# Itanium codes of the element types PyTorch kernels are instantiated for.
SCALARS = ["f", "d", "N3c104HalfE", "N3c108BFloat16E", "i", "l", "h", "b"]
FLOAT_SCALARS = ["f", "d", "N3c104HalfE", "N3c108BFloat16E"]


def _src(name: str) -> str:
    """An Itanium <source-name>: the identifier prefixed by its length."""
    return f"{len(name)}{name}"


def _anon_namespace(rng: np.random.Generator, source_file: str) -> str:
    """The mangled anonymous namespace nvcc gives a .cu file (``_GLOBAL__N__<hash>_..._cu_<hash>``)."""
    stem = f"{source_file}_cu"
    ident = f"_GLOBAL__N__{rng.integers(16**8):08x}_{len(stem)}_{stem}_{rng.integers(16**8):08x}"
    return _src(ident)


def _functor(kind: str, t: str, op: str) -> str:
    """at::native::{A,B,}UnaryFunctor / BinaryFunctor<T, T, T, op<T>> (nested name, mangled)."""
    return f"NS0_{_src(kind)}I{t}{t}{t}{op.format(t=t)}EE"


FUNCTOR_OPS = [
    "NS0_15binary_internal10MulFunctorI{t}EE",
    "NS0_15binary_internal10DivFunctorI{t}EE",
    "NS0_15CUDAFunctor_addI{t}EE",
]
FUNCTOR_KINDS = {"BinaryFunctor": 3, "AUnaryFunctor": 2, "BUnaryFunctor": 2}
UNARY_OPS = [
    ("ActivationGeluKernel", "GeluCUDAKernelImpl"), ("ActivationSiluKernel", "silu_kernel"),
    ("UnaryOpsKernel", "exp_kernel_cuda"), ("UnaryOpsKernel", "rsqrt_kernel_cuda"),
    ("UnaryOpsKernel", "sqrt_kernel_cuda"), ("UnaryLogKernels", "log_kernel_cuda"),
    ("UnarySpecialOpsKernel", "sigmoid_kernel_cuda"), ("UnarySignKernels", "neg_kernel_cuda"),
    ("UnaryGeometricTanhKernel", "tanh_kernel_cuda"), ("AbsKernel", "abs_kernel_cuda"),
    ("UnaryFractionKernels", "reciprocal_kernel_cuda"), ("ActivationHardtanhKernel", "hardtanh_kernel"),
    ("UnaryGeometricCosKernel", "cos_kernel_cuda"), ("UnaryGeometricSinKernel", "sin_kernel_cuda"),
]  # fmt: skip
REDUCE_OPS = [
    "NS0_7MeanOpsI{t}fffEE",
    "NS0_10NormTwoOpsI{t}ffEE",
    "NS0_6MaxOpsIfEE",
    "NS0_6MinOpsIfEE",
    "NS0_10WelfordOpsI{t}fiSt5tupleIJffEEEE",
]
TRITON_OPS = [
    "add", "mul", "native_layer_norm", "_to_copy", "gelu", "view", "sum", "mean", "rsqrt", "pow",
    "div", "sub", "silu", "embedding", "clone", "transpose", "threshold_backward", "native_dropout",
    "_softmax", "where", "exp", "neg", "cat", "slice", "index_put", "copy_", "addmm", "bmm",
    "native_layer_norm_backward", "_log_softmax", "nll_loss_forward", "sigmoid", "tanh", "permute",
    "unsqueeze", "expand", "scatter_add", "convert_element_type", "squeeze", "split", "var_mean",
]  # fmt: skip


def _fill_kernels(rng: np.random.Generator) -> Iterator[str]:
    for t in SCALARS:
        yield f"_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorI{t}EESt5arrayIPcLm1EEEEviT0_T1_"


def _functor_kernels(rng: np.random.Generator) -> Iterator[str]:
    for kind, arity in FUNCTOR_KINDS.items():
        for op in FUNCTOR_OPS:
            for t in SCALARS[:6]:
                fn = _functor(kind, t, op)
                vec = 8 if t in ("N3c104HalfE", "N3c108BFloat16E") else 4
                yield (f"_ZN2at6native29vectorized_elementwise_kernelILi{vec}E{fn}"
                       f"St5arrayIPcLm{arity}EEEEviT0_T1_")
                # the non-contiguous fallback: elementwise_kernel<128, 2, lambda in gpu_kernel_impl_nocast>
                yield (f"_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastI{fn}EE"
                       f"vRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_")


def _unary_lambda_kernels(rng: np.random.Generator) -> Iterator[str]:
    for source_file, fn in UNARY_OPS:
        anon = _anon_namespace(rng, source_file)
        for lam, t in enumerate(FLOAT_SCALARS):
            disc = "" if lam == 0 else str(lam - 1)  # {lambda()#1} is "_", #2 is "0_", ...
            yield ("_ZN2at6native29vectorized_elementwise_kernelILi4E"
                   f"ZZZNS0_{anon}{_src(fn)}ERNS_18TensorIteratorBaseEENKUlvE_clEvENKUlvE{disc}_clEvEUl{t}E_"
                   "St5arrayIPcLm2EEEEviT0_T1_")


def _reduce_kernels(rng: np.random.Generator) -> Iterator[str]:
    for op in REDUCE_OPS:
        for t in FLOAT_SCALARS:
            for block, vt in ((512, 1), (256, 2), (128, 4), (512, 4)):
                for vec in (4, 1):
                    ops = op.format(t=t)
                    yield (f"_ZN2at6native13reduce_kernelILi{block}ELi{vt}ENS0_8ReduceOpI{t}{ops}jfLi4ELi{vec}EEEEEvT1_")


def _softmax_kernels(rng: np.random.Generator) -> Iterator[str]:
    for direction in ("Forward", "Backward"):
        for ilp in (2, 4, 8):
            for t in FLOAT_SCALARS:
                name = f"cunn_SoftMax{direction}"
                epi = _src(f"{'Log' if ilp == 8 else ''}SoftMax{direction}Epilogue")
                yield (f"_ZN2at6native12_GLOBAL__N_1{_src(name)}ILi{ilp}E{t}ffNS1_{epi}EEEvPT2_PKT0_i")


def _nccl_kernels(rng: np.random.Generator) -> Iterator[str]:
    for coll in ("AllReduce", "ReduceScatter", "AllGather", "Broadcast"):
        for red in (("Sum", "Max") if coll in ("AllReduce", "ReduceScatter") else ("Sum",)):
            for ty in ("bf16", "f32", "f16", "u8"):
                for algo in ("RING", "TREE", "NVLS"):
                    for proto in ("LL", "LL128", "SIMPLE"):
                        fn = f"ncclDevKernel_{coll}_{red}_{ty}_{algo}_{proto}"
                        yield f"_Z{_src(fn)}24ncclDevKernelArgsStorageILm4096EE"


def _xmma_kernels(rng: np.random.Generator) -> Iterator[str]:
    types = ["f32f32_f32f32_f32", "f16f16_f16f32_f32", "bf16bf16_bf16f32_f32", "tf32f32_tf32f32_f32"]
    for ty in types:
        for layout in ("tn", "nn", "nt"):
            for tile in ("32x32x8", "64x64x8", "128x64x32", "128x128x32", "256x128x32", "64x32x64"):
                for stage, warps in ((3, "1x2x1"), (4, "2x2x1"), (5, "2x4x1")):
                    op = "ffma" if ty.startswith("f32") else "tensor16x8x16" if "16" in ty else "tensor16x8x8"
                    for split in ("", "split_k_"):
                        align = 4 if ty.startswith(("f32", "tf32")) else 8
                        yield (f"sm80_xmma_gemm_{ty}_{layout}_n_tilesize{tile}_stage{stage}_warpsize{warps}_"
                               f"{op}_aligna{align}_alignc{align}_execute_{split}kernel__5x_cublas")


def _nvjet_kernels(rng: np.random.Generator) -> Iterator[str]:
    for prec in ("hsh", "tst", "sss", "bsb"):
        for tile in ("64x8", "64x16", "128x64", "128x128", "192x128", "256x128", "64x256", "192x192"):
            for k in ("64x4", "64x3", "128x2", "64x5"):
                for cluster in ("1x1", "2x1", "1x2"):
                    for raster in ("v", "h"):
                        for coop in ("", "_coopA", "_coopB"):
                            for layout in ("TNT", "NNT", "NTT", "TNN"):
                                yield f"nvjet_sm90_{prec}_{tile}_{k}_{cluster}_{raster}_bz{coop}_{layout}"


def _triton_kernels(rng: np.random.Generator) -> Iterator[str]:
    seen: set[str] = set()
    while True:
        kind = rng.choice(["poi", "red", "per"], p=[0.6, 0.25, 0.15])
        n_ops = int(rng.integers(1, 6))
        ops = "_".join(str(o) for o in rng.choice(TRITON_OPS, size=n_ops, replace=False))
        name = f"triton_{kind}_fused_{ops}_{int(rng.integers(0, 80))}"
        if name not in seen:
            seen.add(name)
            yield name


# family -> (generator of its mangled names, share of the distinct names); Triton kernels, an
# endless family, make up the rest
FAMILIES: dict[str, tuple[Callable[[np.random.Generator], Iterator[str]], float]] = {
    "fill": (_fill_kernels, 0.015),
    "functor": (_functor_kernels, 0.12),
    "unary": (_unary_lambda_kernels, 0.08),
    "reduce": (_reduce_kernels, 0.10),
    "softmax": (_softmax_kernels, 0.03),
    "nccl": (_nccl_kernels, 0.04),
    "xmma": (_xmma_kernels, 0.10),
    "nvjet": (_nvjet_kernels, 0.15),
}


def _demangled(mangled: str) -> str:
    text = demangle(mangled)
    if mangled.startswith("_Z") and text == mangled:
        raise RuntimeError(f"synthetic mangled name does not demangle: {mangled}")
    return text


def build_names(n_names: int, rng: np.random.Generator) -> list[KernelName]:
    """Return ``n_names`` distinct kernels, mixed from the families, in random (= rank) order."""
    picked: list[tuple[str, str]] = []  # (family, mangled name)
    for family, (gen, share) in FAMILIES.items():
        pool = list(dict.fromkeys(gen(rng)))
        picked += [(family, pool[i]) for i in rng.permutation(len(pool))[: round(share * n_names)]]
    picked += [("triton", m) for m in itertools.islice(_triton_kernels(rng), n_names - len(picked))]
    names = [KernelName(mangled, _demangled(mangled), family) for family, mangled in picked]
    return [names[i] for i in rng.permutation(len(names))]
