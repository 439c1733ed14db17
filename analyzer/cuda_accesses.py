"""Memory accesses and device calls inside function bodies: the clang pass's access scan.

Each load, store and atomic through a pointer whose kind is not local (subscripts, derefs, `->`,
`__ldg`-style intrinsics, `atomicAdd`-style and `cuda::atomic_ref` operations, inline asm, GEMM
operands that point into a peer's buffer), with its width, scope and order; fences; and the API
calls the taxonomy counts (host waits, grid syncs, NVSHMEM, TMA, multicast, IPC, allocations).

`AccessScan` is a mixin of the clang pass (analyzer/clang_pass.py): it reads the copied tree and
writes `facts.accesses`, `facts.fences`, `facts.api_calls` and `facts.asm`; pointer kinds come
from `PointerFlow.eval`; inline asm is decoded by analyzer/ptx_ops.py.
"""

from __future__ import annotations

import re

from analyzer import ptx_ops
from analyzer.clang_ast import FuncNode, Node, unwrap
from analyzer.cuda_calls import (
    ALLOC,
    ATOMIC_RE,
    ATOMIC_REF_METHODS,
    BLAS_GEMM_RE,
    FENCE_CALLS,
    HOST_SYNC,
    LAUNCH_APIS,
    LOAD_INTRINSICS,
    MEMCPY_RE,
    NVSHMEM_SYNC_RE,
    NVSHMEM_XFER_RE,
    STORE_INTRINSICS,
    TORCH_ALLOC,
)
from analyzer.cuda_pointers import ARRAY_KINDS
from pkb.facts import PEER_KINDS, ApiCall, AsmStmt, Fence, Launch, MemAccess


class AccessScan:
    """Access, fence and API-call facts (see the module docstring)."""

    def uses(self, n: Node) -> set[str]:
        """How an lvalue expression is used: {'load'}, {'store'}, both, or nothing (address taken)."""
        cur = n
        while True:
            p = cur.parent
            if p is None:
                return {"load"}
            if p.kind == "PAREN_EXPR":
                cur = p
                continue
            if p.kind == "MEMBER_REF_EXPR" and p.kids and p.kids[0] is cur:
                if p.parent is not None and p.parent.kind == "CALL_EXPR" and p.parent.kids and p.parent.kids[0] is p:
                    return set()  # method call on the element (e.g. atomic type): not a plain access
                cur = p
                continue
            break
        if p.kind == "BINARY_OPERATOR" and self.binop(p) == "Assign":
            return {"store"} if p.kids and p.kids[0] is cur else {"load"}
        if p.kind == "COMPOUND_ASSIGNMENT_OPERATOR":
            return {"load", "store"} if p.kids and p.kids[0] is cur else {"load"}
        if p.kind == "UNARY_OPERATOR":
            op = self.unary_op(p)
            if op == "&":
                return set()
            if op in ("++", "--"):
                return {"load", "store"}
            return {"load"}
        if p.kind == "ARRAY_SUBSCRIPT_EXPR" and p.kids and p.kids[0] is cur:
            return set()
        if p.kind == "CALL_EXPR":
            if p.spelling == "operator=" and p.kids and p.kids[0] is cur:
                return {"store"}
            if p.spelling == "operator=":
                return {"load"}  # the right side of a struct copy (float4 a = b): read whole
            if self.is_constructor(p) and "atomic" not in p.spelling:
                return {"load"}
            return set()  # bound to a reference parameter
        if p.kind == "VAR_DECL":
            try:
                if p.type.kind.name in ("LVALUEREFERENCE", "RVALUEREFERENCE"):
                    return set()
            except Exception:
                pass
            return {"load"}
        return {"load"}

    def base_name(self, n: Node) -> str:
        s = unwrap(n)
        while s.kind in ("ARRAY_SUBSCRIPT_EXPR", "BINARY_OPERATOR", "UNARY_OPERATOR", "MEMBER_REF_EXPR") and s.kids:
            if s.kind == "MEMBER_REF_EXPR" and s.ref is not None and s.ref.kind.name == "FIELD_DECL":
                return s.spelling
            s = unwrap(s.kids[0])
        if s.kind == "CALL_EXPR":
            obj = self.call_object(s)
            if obj is not None:
                return self.base_name(obj)
        return s.spelling or self.snippet(s, 40)

    def width_of(self, n: Node) -> int:
        try:
            sz = n.type.get_size()
            return sz * 8 if sz and sz > 0 else 0
        except Exception:
            return 0

    def is_volatile(self, n: Node) -> bool:
        try:
            if n.type.is_volatile_qualified():
                return True
            base = unwrap(n.kids[0]) if n.kids else None
            t = n.kids[0].type if n.kids else None
            return bool(t is not None and t.kind.name == "POINTER" and t.get_pointee().is_volatile_qualified()) or (
                base is not None and "volatile" in base.type.spelling)
        except Exception:
            return False

    def record(self, f: FuncNode, n: Node, kind: str, ptr_expr: Node, pkind: str, via: str, width: int = 0,
               scope: str = "", order: str = "") -> None:
        name = self.base_name(ptr_expr)
        # helper summary: which params a device function reads through
        if kind in ("load", "atomic") and f.kind != "host":
            for i, p in enumerate(f.params):
                if p.spelling == name:
                    prev = self.helper_reads.setdefault(f.name, {}).get(i, "")
                    if not prev or order in ("acquire", "volatile"):
                        self.helper_reads[f.name][i] = order or ("atomic" if kind == "atomic" else "relaxed")
        if pkind == "local":
            return
        self.facts.accesses.append(MemAccess(function=f.name, line=self.line(n), kind=kind, pointer=name,
                                             pointer_kind=pkind, via=via, width_bits=width, scope=scope,
                                             order=order, snippet=self.snippet(n)))
        if pkind == "multicast_ptr":
            self.api(f, n, "multicast_ptr", "nvls")

    def plain_access(self, f: FuncNode, n: Node, ptr: Node, via: str) -> None:
        pk = self.eval(ptr)[0]
        if pk in ARRAY_KINDS:
            return  # reading the pointer table itself (local memory)
        try:
            if n.type.kind.name in ("CONSTANTARRAY",):
                return  # a row of a 2-D array, not an access yet
        except Exception:
            pass
        uses = self.uses(n)
        if not uses:
            return
        order = "volatile" if self.is_volatile(n) else ""
        for u in sorted(uses):  # 'load' before 'store'
            self.record(f, n, u, ptr, pk, via, self.width_of(n), order=order)

    def api(self, f: FuncNode, n: Node, api: str, category: str) -> None:
        line = self.line(n)
        for a in self.facts.api_calls:
            if a.api == api and a.line == line and a.category == category:
                return
        self.facts.api_calls.append(ApiCall(api=api, line=line, function=f.name, category=category,
                                            snippet=self.snippet(n)))

    def _tensor_method(self, n: Node) -> bool:
        obj = self.call_object(n)
        return obj is not None and re.search(r"\bTensor\b", obj.type.spelling or "") is not None

    def scan_call(self, f: FuncNode, n: Node, device: bool) -> None:
        name = n.spelling
        args = self.call_args(n)
        if self.is_launch(n):
            self.add_launch(f, n)
            return
        if name in LAUNCH_APIS:
            kname, kargs = self.launch_api_parts(n)
            coop = name == "cudaLaunchCooperativeKernel"
            self.facts.launches.append(Launch(kernel=kname, line=self.line(n), caller=f.name,
                                              args=[self.snippet(a, 80) for a in kargs],
                                              arg_kinds=[self.eval(a)[0] for a in kargs],
                                              grid=self.snippet(args[1], 60) if len(args) > 1 and not coop or len(args) > 1 else "",
                                              block=self.snippet(args[2], 60) if len(args) > 2 else "",
                                              cooperative=coop,
                                              stream=self.snippet(args[5], 60) if len(args) > 5 else ""))
            if coop:
                self.api(f, n, name, "grid_sync")
            return
        m = ATOMIC_RE.match(name)
        if m and device and args:
            scope = {"_system": "system", "_block": "cta"}.get(m.group(2) or "", "gpu")
            addr = args[0]
            try:
                width = addr.type.get_pointee().get_size() * 8
                width = max(width, 0)
            except Exception:
                width = 0
            self.record(f, n, "atomic", addr, self.eval(addr)[0], "intrinsic", width, scope, "relaxed")
            return
        if device and (name in LOAD_INTRINSICS or name in STORE_INTRINSICS) and args:
            kind = "load" if name in LOAD_INTRINSICS else "store"
            self.record(f, n, kind, args[0], self.eval(args[0])[0], "intrinsic", self.width_of(n) if kind == "load" else 0,
                        order="volatile" if name == "__ldcv" else "")
            return
        if device and name in ATOMIC_REF_METHODS and n.kids and n.kids[0].kind == "MEMBER_REF_EXPR":
            obj = self.call_object(n)
            if obj is not None and re.search(r"atomic_ref|atomic<", obj.type.spelling):
                self.atomic_ref_access(f, n, obj, args)
                return
        if name in FENCE_CALLS:
            self.facts.fences.append(Fence(kind=name, line=self.line(n), function=f.name, scope=FENCE_CALLS[name]))
            return
        if name == "atomic_thread_fence":
            t = self.snippet(n)
            scope = "gpu" if "thread_scope_device" in t else ("cta" if "thread_scope_block" in t else "system")
            self.facts.fences.append(Fence(kind="atomic_thread_fence", line=self.line(n), function=f.name, scope=scope))
            return
        if MEMCPY_RE.match(name):
            self.add_memcpy(f, n, args)
            return
        if BLAS_GEMM_RE.match(name):
            # a GEMM operand that points into a peer's buffer is read by the library's kernel
            # over NVLink: an SM load of peer memory, issued from host code
            for a in args:
                kind = self.eval(a)[0]
                if kind in PEER_KINDS:
                    self.record(f, n, "load", a, kind, "library")
            return
        if name in HOST_SYNC:
            self.api(f, n, name, "host_sync")
        elif name in ("item", "cpu") and not device and self._tensor_method(n):
            # host code reading a CUDA tensor's value (`sizes.cpu()`, `total.item<int64_t>()`): a
            # copy to the host that waits for the stream
            self.api(f, n, f"Tensor::{name}", "host_sync")
        elif name == "synchronize" and "Event" in (self.call_object(n).type.spelling if self.call_object(n) else ""):
            self.api(f, n, "cudaEventSynchronize", "host_sync")
        elif name == "sync" and self.call_object(n) is not None and "grid_group" in self.grid_type(self.call_object(n)):
            self.api(f, n, "grid.sync", "grid_sync")
        elif name == "sync" and args and "grid_group" in self.grid_type(args[0]):
            self.api(f, n, "cg::sync(grid)", "grid_sync")
        elif name.startswith("nvshmem"):
            if NVSHMEM_SYNC_RE.match(name):
                self.api(f, n, name, "nvshmem_sync")
            elif NVSHMEM_XFER_RE.match(name):
                self.api(f, n, name, "nvshmem")
        elif name.startswith("cuTensorMapEncode") or name in ("memcpy_async_tx",) or (
            name == "memcpy_async" and "cuda" in self.snippet(n)) or name.startswith("cp_async_bulk"):
            self.api(f, n, name, "tma")
        elif name.startswith("cuMulticast"):
            self.api(f, n, name, "nvls")
        elif name.startswith("cudaIpc"):
            self.api(f, n, name, "ipc")
        elif name in ALLOC and (name not in TORCH_ALLOC or f.kind == "host"):
            self.api(f, n, name if name.startswith(("cuda", "nvshmem")) else "torch::" + name, "alloc")
        elif name in ("cudaEventRecord", "cudaStreamWaitEvent"):
            self.api(f, n, name, "other")

    def grid_type(self, n: Node) -> str:
        """Type of a group object before implicit conversions (grid_group, thread_block, ...)."""
        try:
            s = unwrap(n)
            if s.kind == "CALL_EXPR" and s.spelling == "this_grid":
                return "grid_group"
            return s.type.spelling + " " + n.type.spelling
        except Exception:
            return ""

    def atomic_ref_access(self, f: FuncNode, n: Node, obj: Node, args: list[Node]) -> None:
        o = unwrap(obj)
        target = None
        tspell = obj.type.spelling
        if o.kind == "DECL_REF_EXPR":
            ent = self.atomic_refs.get(self.key_of_ref(o))
            if ent is not None:
                target, tspell = ent
        elif o.kind == "CALL_EXPR":
            a = self.call_args(o)
            target = a[0] if a else None
            tspell = o.type.spelling
        if target is None:
            return
        t = unwrap(target)
        if t.kind == "ARRAY_SUBSCRIPT_EXPR" and t.kids:
            ptr = t.kids[0]
        elif t.kind == "UNARY_OPERATOR" and t.kids:
            ptr = t.kids[0]
        else:
            ptr = t
        scope = "system"
        if "thread_scope_device" in tspell:
            scope = "gpu"
        elif "thread_scope_block" in tspell:
            scope = "cta"
        order = "seq_cst"
        for a in args:
            for x in a.walk():
                if x.spelling.startswith("memory_order_"):
                    order = x.spelling[len("memory_order_"):]
        order = {"consume": "acquire"}.get(order, order)
        kind = {"load": "load", "store": "store", "wait": "load"}.get(n.spelling, "atomic")
        self.record(f, n, kind, ptr, self.eval(ptr)[0], "intrinsic", self.width_of(t), scope, order)

    def scan_asm(self, f: FuncNode, n: Node) -> None:
        """An asm statement: its mnemonics, its fences and engine calls, and each memory access
        through an operand (what each instruction means is ptx_ops' to say)."""
        text = self.text_of(n)
        i = text.find("(")
        j = text.rfind(")")
        if i < 0 or j <= i:
            self.facts.asm.append(AsmStmt(line=self.line(n), function=f.name, mnemonics=[], text=self.snippet(n)))
            return
        asm = ptx_ops.asm_parts(text[i + 1:j])
        operands = asm.operands
        # libclang's children of an asm statement are its operand expressions, in order
        op_nodes: list[Node | None] = list(n.kids) if len(n.kids) == len(operands) else [None] * len(operands)
        self.facts.asm.append(AsmStmt(line=self.line(n), function=f.name, mnemonics=asm.mnemonics,
                                      text=" ".join(asm.template.split())[:300]))
        for opcode, rest in asm.instructions:
            op = ptx_ops.decode(opcode)
            if op.is_fence:
                self.facts.fences.append(Fence(kind=op.fence_kind, line=self.line(n), function=f.name, scope=op.scope))
            if op.engine:
                self.api(f, n, opcode, op.engine)
            for mem_kind, ref in ptx_ops.memory_targets(opcode, rest):
                idx = asm.operand_index(ref)
                if not (0 <= idx < len(operands)):
                    continue
                node = op_nodes[idx]
                if node is not None:
                    pk = self.eval(node)[0]
                    ptr_node = node
                else:
                    pk = self.kind_by_text(operands[idx][2])
                    ptr_node = None
                if pk == "unknown" and ".shared" in opcode and not opcode.startswith(("cp.", "multimem")):
                    continue
                if ptr_node is not None:
                    self.record(f, n, mem_kind, ptr_node, pk, "asm", op.width_bits, op.scope, op.order)
                elif pk != "local":
                    self.facts.accesses.append(MemAccess(function=f.name, line=self.line(n), kind=mem_kind,
                                                         pointer=operands[idx][2], pointer_kind=pk, via="asm",
                                                         width_bits=op.width_bits, scope=op.scope, order=op.order,
                                                         snippet=opcode))
