"""Triton kernels of a candidate: their parameters that carry peer pointers or signal pads (from the
launches' pointer kinds and the parameter names), and their loads, stores, atomics and spin loops,
peer ones apart.

Reads the parsed `@triton.jit` functions and the launch calls the Python pass recorded.
"""

from __future__ import annotations

import ast

from pkb.facts import TritonKernel

from analyzer.python_api import PEERISH


class TritonKernels:
    """Facts of the file's Triton kernels (a mixin of PythonPass)."""

    def _triton(self) -> None:
        launches = [c for c in self.facts.calls if c.category == "triton_launch"]
        for name in sorted(self.triton_names):
            fn = self.functions[name]
            params = [a.arg for a in fn.args.args]
            kernel = TritonKernel(name=name, line=fn.lineno, end_line=fn.end_lineno or fn.lineno, params=params)
            for launch in launches:
                if launch.target != name:
                    continue
                for a in launch.args:
                    pname = params[a.position] if 0 <= a.position < len(params) else a.keyword
                    if pname and a.pointer_kind in PEERISH and a.pointer_kind != "symm_local":
                        kernel.peer_params[pname] = a.pointer_kind
            for p in params:
                low = p.lower()
                if p not in kernel.peer_params:
                    if any(k in low for k in ("remote", "peer", "ptrs", "buffer_ptrs")):
                        kernel.peer_params[p] = "peer_ptr_array" if "ptrs" in low else "peer_ptr"
                    elif any(k in low for k in ("signal", "flag")):
                        kernel.peer_params[p] = "signal_ptr_array" if "ptrs" in low or "pads" in low else "signal_ptr"
            peer_vars = dict(kernel.peer_params)
            # Follow `ptr = tl.load(ptrs + r).to(tl.pointer_type(...))` and `p = ptr + offs`.
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    names = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
                    hit = [peer_vars[n] for n in names if n in peer_vars]
                    if hit:
                        k = hit[0]
                        if "pointer_type" in ast.unparse(node.value) and k.endswith("_array"):
                            k = k.replace("_array", "")
                        peer_vars[node.targets[0].id] = k
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    q = self.qualname(node.func)
                    last = q.split(".")[-1]
                    if not (q.startswith("triton.language") or q.startswith("tl.")):
                        continue
                    ptr = node.args[0] if node.args else None
                    names = {n.id for n in ast.walk(ptr) if isinstance(n, ast.Name)} if ptr is not None else set()
                    kinds = {peer_vars[n] for n in names if n in peer_vars}
                    peer = any(k in ("peer_ptr", "peer_tensor", "nvshmem_ptr") for k in kinds)
                    if last == "load":
                        kernel.loads.append(node.lineno)
                        if peer and "pointer_type" not in ast.unparse(node):
                            kernel.peer_loads.append(node.lineno)
                    elif last == "store":
                        kernel.stores.append(node.lineno)
                        if peer:
                            kernel.peer_stores.append(node.lineno)
                    elif last.startswith("atomic_"):
                        kernel.atomics.append(node.lineno)
                        if peer:
                            kernel.peer_atomics.append(node.lineno)
                elif isinstance(node, ast.While):
                    if any(isinstance(s, ast.Call) and self.qualname(s.func).split(".")[-1] in ("load", "atomic_cas", "atomic_add", "atomic_xchg") for s in ast.walk(node.test)) or (
                        isinstance(node.test, ast.Constant) and node.test.value
                    ):
                        kernel.spin_loops.append(node.lineno)
            self.facts.triton_kernels.append(kernel)
