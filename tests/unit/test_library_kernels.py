"""Kernels of the libraries a recording holds are told apart by name, so the audit files their
internal memory as held, not as memory of unknown owner."""

from __future__ import annotations

import pytest

from cupygraph.backends.guards.library_kernels import library_of


@pytest.mark.parametrize("name, library", [
    ("_Z20zgemm1x1_kernel_coreILb0ELb0ELb0ELb0ELb0EEv20cublasZgemm1x1Params", "cuBLAS"),
    ("_Z11getrf_pivotI13getrf_params_IdLi32ELi1ELi32ELi32ELi1EEEviiiPviPliPNT_9data_typeEPjS7_S6_jjjPi", "cuSOLVER"),
    ("_ZN8cusparse17csrmm_alg2_kernelILb0ELb0ELb0EiiiiddddEEvT2_S1_T3_S1_iiNS_12KernelCoeffsIT9_EEiiPKS1_", "cuSPARSE"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "NCCL"),
])
def test_library_kernels_are_named(name, library):
    assert library_of(name) == library


@pytest.mark.parametrize("name", ["cupy_add", "cupy_take", "my_stencil", "_Z6affinePKfPflff"])
def test_cupy_and_user_kernels_are_no_library(name):
    assert library_of(name) is None
