"""The native compute libraries that keep a thread pool of their own (BLAS, OpenMP, oneDNN,
torch, ONNX Runtime): how a frame's file or a mapped library is recognised as one, and the knob
that sizes its pool. Read by the stack classifier (a frame inside one is not the interpreter), the
kernel wait reader (a process that maps one) and the pool analysis (model/native_pools.py)."""

from __future__ import annotations

import re

# (library, file pattern, knob to set its pool size)
LIBRARIES = (
    ("OpenBLAS", re.compile(r"openblas", re.I), "OPENBLAS_NUM_THREADS"),
    ("MKL", re.compile(r"libmkl", re.I), "MKL_NUM_THREADS"),
    ("OpenMP (Intel)", re.compile(r"libiomp", re.I), "OMP_NUM_THREADS"),
    ("OpenMP", re.compile(r"libgomp|libomp\.", re.I), "OMP_NUM_THREADS"),
    ("oneDNN", re.compile(r"libdnnl|libmkldnn", re.I), "OMP_NUM_THREADS"),
    ("torch", re.compile(r"libtorch|libc10", re.I), "torch.set_num_threads"),
    ("ONNX Runtime", re.compile(r"onnxruntime", re.I), "intra_op_num_threads"),
)
