"""dense @ CSR (``y = x @ s``) forms on cuSPARSE: which capture, which are bit-reproducible.

Run by ``tools/probe_cusolver_capture.py`` (one process per form and dtype). Forms:

* ``spmm_transpose_a``: SpMM on the transposed s, x and y as column-major views (no copies);
* ``csr2csc_then_spmm``: s^T by csr2cscEx2, then untransposed SpMM on the column-major views;
* ``csr2csc_only``: csr2cscEx2 alone, compared with cupyx's ``s.T.tocsr()``;
* ``col_spmm_prebuilt_transpose``: s^T from cupyx (eagerly), untransposed SpMM on the views.

Each reports whether 20 eager runs were bit-identical, whether it captured, and whether a replay
on new data was correct and equal to an eager call bit for bit.
"""

from __future__ import annotations

import importlib
from typing import Any

FORMS = ["spmm_transpose_a", "csr2csc_then_spmm", "csr2csc_only", "col_spmm_prebuilt_transpose"]


def probe(form: str, dtype: str) -> dict[str, Any]:
    """y = x @ s (x dense M x K, s CSR K x N), without a transposed copy of x."""
    import cupy
    import cupyx.scipy.sparse as cps
    import numpy as np
    sp = importlib.import_module("nvmath.bindings.cusparse")  # optional, as cupygraph.linalg imports it

    row: dict[str, Any] = {"kind": "dense@csr", "routine": form, "dtype": dtype}
    M, K, N = 256, 4096, 1024
    s = cps.random(K, N, density=0.05, format="csr", dtype=np.dtype(dtype), random_state=3)
    rng = np.random.default_rng(4)
    x = cupy.asarray(rng.standard_normal((M, K)).astype(dtype))
    y = cupy.empty((M, N), dtype)
    h = int(sp.create())
    stream = cupy.cuda.Stream(non_blocking=True)
    sp.set_stream(h, stream.ptr)
    code = 0 if dtype == "float32" else 1  # CUDA_R_32F, CUDA_R_64F
    alpha, beta = np.ones((), dtype), np.zeros((), dtype)
    col = 1
    if form == "csr2csc_only":
        with stream:
            t_val, t_ptr, t_ind = cupy.empty(s.nnz, dtype), cupy.empty(N + 1, np.int32), cupy.empty(s.nnz, np.int32)
            conv = (h, K, N, s.nnz, s.data.data.ptr, s.indptr.data.ptr, s.indices.data.ptr, t_val.data.ptr,
                    t_ptr.data.ptr, t_ind.data.ptr, code, 1, 0, 1)
            conv_buf = cupy.empty(max(int(sp.csr2csc_ex2_buffer_size(*conv)), 1), cupy.uint8)
            sp.csr2csc_ex2(*conv, conv_buf.data.ptr)
        try:
            stream.synchronize()
            want_t = s.T.tocsr()
            same = (np.array_equal(cupy.asnumpy(t_ptr), cupy.asnumpy(want_t.indptr))
                    and np.array_equal(cupy.asnumpy(t_ind), cupy.asnumpy(want_t.indices))
                    and np.array_equal(cupy.asnumpy(t_val), cupy.asnumpy(want_t.data)))
            row["eager"] = "ok" if same else "differs from cupyx's s.T.tocsr()"
        except Exception as err:
            row["eager"] = f"{type(err).__name__}: {err}"
        return row
    with stream:
        if form == "col_spmm_prebuilt_transpose":
            st = s.T.tocsr()  # cupyx, eagerly
            mat_a = sp.create_csr(N, K, st.nnz, st.indptr.data.ptr, st.indices.data.ptr, st.data.data.ptr, 2, 2, 0,
                                  code)
            op_a = 0
        elif form == "csr2csc_then_spmm":
            t_val, t_ptr, t_ind = cupy.empty(s.nnz, dtype), cupy.empty(N + 1, np.int32), cupy.empty(s.nnz, np.int32)
            conv = (h, K, N, s.nnz, s.data.data.ptr, s.indptr.data.ptr, s.indices.data.ptr, t_val.data.ptr,
                    t_ptr.data.ptr, t_ind.data.ptr, code, 1, 0, 1)
            conv_buf = cupy.empty(max(int(sp.csr2csc_ex2_buffer_size(*conv)), 1), cupy.uint8)
            mat_a = sp.create_csr(N, K, s.nnz, t_ptr.data.ptr, t_ind.data.ptr, t_val.data.ptr, 2, 2, 0, code)
            op_a = 0
        else:
            mat_a = sp.create_csr(K, N, s.nnz, s.indptr.data.ptr, s.indices.data.ptr, s.data.data.ptr, 2, 2, 0, code)
            op_a = 1
        mat_b = sp.create_dn_mat(K, M, K, x.data.ptr, code, col)  # x (M, K) C-order = x^T (K, M) column-major
        mat_c = sp.create_dn_mat(N, M, N, y.data.ptr, code, col)  # y (M, N) C-order = y^T (N, M) column-major
        args = (h, op_a, 0, alpha.ctypes.data, mat_a, mat_b, beta.ctypes.data, mat_c, code, 0)
        buf = cupy.empty(max(int(sp.sp_mm_buffer_size(*args)), 1), cupy.uint8)

    def run() -> None:
        with stream:
            if form == "csr2csc_then_spmm":
                sp.csr2csc_ex2(*conv, conv_buf.data.ptr)
            sp.sp_mm(*args, buf.data.ptr)

    want = cupy.asnumpy(x).astype(np.float64) @ s.get().toarray().astype(np.float64)
    tol = 1e-4 if dtype == "float32" else 1e-10
    runs = []
    for _ in range(20):
        y.fill(np.nan)
        run()
        stream.synchronize()
        runs.append(cupy.asnumpy(y))
    row["eager"] = "ok" if np.allclose(runs[0], want, rtol=tol, atol=tol * np.abs(want).max()) else "wrong"
    row["eager_deterministic_20_runs"] = all(np.array_equal(runs[0], r) for r in runs)
    stream.begin_capture()
    error = ""
    try:
        run()
    except Exception as err:
        error = f"{type(err).__name__}: {err}"
    finally:
        try:
            graph = stream.end_capture()
        except Exception as err:
            error = error or f"end_capture: {err}"
    row["capture"] = error or "ok"
    if not error:
        x[...] = cupy.asarray(rng.standard_normal((M, K)).astype(dtype))
        y.fill(np.nan)
        graph.launch(stream)
        stream.synchronize()
        replay = cupy.asnumpy(y)
        want = cupy.asnumpy(x).astype(np.float64) @ s.get().toarray().astype(np.float64)
        row["replay"] = "ok" if np.allclose(replay, want, rtol=tol, atol=tol * np.abs(want).max()) else "wrong"
        run()
        stream.synchronize()
        row["replay_equals_eager_bitwise"] = bool(np.array_equal(replay, cupy.asnumpy(y)))
    return row
