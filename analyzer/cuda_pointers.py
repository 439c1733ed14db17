"""Pointer kinds and how they flow: the clang pass's dataflow over the candidate's variables.

A value's kind is (kind, basis): kind from TAXONOMY.md's pointer words (peer_ptr, signal_ptr,
multicast_ptr, their arrays, local, ...), basis saying how it is known (seed from the Python
pass, dataflow, or a name guess). Kinds flow: seeds -> host params -> host locals -> launch args
-> kernel params -> __device__ callees, to a fixpoint; names are a last resort (basis "name").

`PointerFlow` is a mixin of the clang pass (analyzer/clang_pass.py); it reads the copied tree
and the pass's state (`env`, `ret`, `var_nodes`, `atomic_refs`, `seeds`, `funcs`, `cur_func`) and
uses `AstView`'s reading helpers and `LaunchScan.is_launch` / `launch_api_parts`.
"""

from __future__ import annotations

import re

from analyzer import cuda_branches
from analyzer.clang_ast import EXPR_WRAPPERS, MAIN_NAME, Node, unwrap
from analyzer.cuda_calls import DATA_PTR_METHODS, LAUNCH_APIS, TENSOR_VIEW_METHODS, TORCH_ALLOC

RANK_NAMES = {"rank", "my_rank", "local_rank", "rank_id", "myrank", "my_pe", "mype", "self_rank"}
# A local named `rank` that takes its value from the launch geometry (`int rank = blockIdx.y;`, one
# block row per peer) or from a loop over ranks walks the peers: it is not this rank.
GEOMETRY_INDEX = re.compile(r"\b(blockIdx|threadIdx|warp_id|warpId|lane)\b")
_LOADED_INIT = re.compile(r"=[^;=]*\w\s*\[[^\]]+\]")

# Higher wins when two facts about one variable meet: the more specific / more dangerous kind.
KIND_PRIORITY = {
    k: i
    for i, k in enumerate(
        ["unknown", "local", "symm_local", "peer_tensor", "nvshmem_ptr", "signal_ptr", "peer_ptr",
         "multicast_ptr", "signal_ptr_array", "peer_ptr_array"]
    )
}
BASIS_PRIORITY = {"": 0, "name": 1, "dataflow": 2, "seed": 3}
ARRAY_KINDS = ("peer_ptr_array", "signal_ptr_array")
ELEMENT_OF = {"peer_ptr_array": "peer_ptr", "signal_ptr_array": "signal_ptr"}
ARRAY_OF = {"peer_ptr": "peer_ptr_array", "symm_local": "peer_ptr_array", "nvshmem_ptr": "peer_ptr_array",
             "signal_ptr": "signal_ptr_array", "peer_tensor": "peer_ptr_array"}


_POINTER_TO_POINTER = re.compile(r"\*(?:const|volatile|__restrict__)*\*")


def join_kinds(a: tuple[str, str], b: tuple[str, str]) -> tuple[str, str]:
    ka, kb = KIND_PRIORITY.get(a[0], 0), KIND_PRIORITY.get(b[0], 0)
    if ka != kb:
        return a if ka > kb else b
    return a if BASIS_PRIORITY.get(a[1], 0) >= BASIS_PRIORITY.get(b[1], 0) else b


def derived(v: tuple[str, str]) -> tuple[str, str]:
    """A value computed from another: seed facts become dataflow facts, name guesses stay guesses."""
    if v[0] == "unknown":
        return ("unknown", "")
    return (v[0], "name" if v[1] == "name" else "dataflow")


def guess_kind(name: str, tspell: str, tkind: str) -> str:
    """The pointer kind a declaration's name and type suggest (remote_*, *_ptrs, signal*, mc_*),
    or '': the last resort when no dataflow fact reaches it (basis "name")."""
    low = name.lower()
    t = tspell.replace(" ", "")
    is_ptr = "*" in t or tkind in ("POINTER", "CONSTANTARRAY", "INCOMPLETEARRAY")
    multi = ("**" in t or "*const*" in t or "*__restrict*" in t or "vector<" in t
             or (tkind in ("CONSTANTARRAY", "INCOMPLETEARRAY") and "*" in t)
             or re.search(r"(int64_t|uint64_t|uintptr_t|intptr_t|longlong|long)\*", t) is not None
             or "Tensor" in t)
    is_addr_int = re.fullmatch(r"(const)?(int64_t|uint64_t|uintptr_t|intptr_t|long|unsignedlong|longlong|unsignedlonglong|CUdeviceptr)", t) is not None
    if not (is_ptr or is_addr_int or "Tensor" in t or "vector<" in t):
        return ""
    if re.search(r"multicast|mc_ptr|mcptr|mc_buf", low):
        return "multicast_ptr"
    if re.search(r"signal|flag|sig|barrier_flags", low):
        return "signal_ptr_array" if multi else "signal_ptr"
    if re.search(r"remote|peer|buffer_ptrs|ptrs|bufs", low):
        if multi:
            return "peer_ptr_array"
        if re.search(r"remote|peer", low) and (is_ptr or (is_addr_int and re.search(r"ptr|addr|buf", low))):
            return "peer_ptr"
    return ""


def dependent_operator(n: Node) -> tuple[str, list[Node]]:
    """An operator call clang left unresolved (an operand of a template's dependent type): the
    operator's name and its operands, or ('', [])."""
    if n.kind != "CALL_EXPR" or n.spelling:
        return "", []
    for i, ch in enumerate(n.kids):
        ref = ch.kids[0] if ch.kind == "DECL_REF_EXPR" and ch.kids else ch
        if ref.kind == "OVERLOADED_DECL_REF" and ref.spelling.startswith("operator"):
            return ref.spelling, n.kids[:i] + n.kids[i + 1:]
    return "", []


def dependent_callee(n: Node) -> str:
    """The function a call names when clang left it unresolved (`ld<P>(gp, i)` in a template, its
    arguments of a dependent type): the name, or ''."""
    if n.kind != "CALL_EXPR" or n.spelling or not n.kids:
        return ""
    first = n.kids[0]
    ref = first.kids[0] if first.kind in ("DECL_REF_EXPR", "UNEXPOSED_EXPR") and first.kids else first
    if ref.kind == "OVERLOADED_DECL_REF" and not ref.spelling.startswith("operator"):
        return ref.spelling
    return ""


class PointerFlow:
    """The pointer-kind environment and its fixpoint (see the module docstring)."""

    def run_flags(self) -> dict[str, bool]:
        """The source's bools that hold on PKB's run (`bool use_multimem`), read once."""
        if self._run_flags is None:
            self._run_flags = cuda_branches.run_flags(self.text)
        return self._run_flags

    def key_of_decl(self, c) -> tuple:
        f = c.location.file
        if f is not None and f.name == MAIN_NAME:
            return ("v", c.spelling, c.location.offset)
        return ("p", c.spelling)

    def key_of_ref(self, n: Node) -> tuple | None:
        r = n.ref
        if r is not None and r.kind.name in ("VAR_DECL", "PARM_DECL", "FIELD_DECL"):
            return self.key_of_decl(r)
        if n.spelling:
            return ("u", self.cur_func.name if self.cur_func else "", n.spelling)
        return None

    def setv(self, key: tuple | None, val: tuple[str, str]) -> None:
        if key is None or val[0] == "unknown" or key[0] == "p":
            return
        old = self.env.get(key, ("unknown", ""))
        new = join_kinds(old, val)
        if new != old:
            self.env[key] = new
            self.changed = True

    def getv(self, key: tuple | None) -> tuple[str, str]:
        if key is None:
            return ("unknown", "")
        return self.env.get(key, ("unknown", ""))

    def is_rank_index(self, n: Node) -> bool:
        s = unwrap(n)
        if s.kind == "DECL_REF_EXPR" and self.key_of_ref(s) in self.peer_index_vars:
            return False
        return s.kind in ("DECL_REF_EXPR", "MEMBER_REF_EXPR") and s.spelling.lower() in RANK_NAMES

    def note_peer_index(self, n: Node, key: tuple) -> None:
        """Remember a device-code local named like the rank that walks the peers (see GEOMETRY_INDEX)."""
        if self.cur_func is None or self.cur_func.kind == "host":
            return
        text = self.text_of(n)
        if "=" in text:
            init = text.split("=", 1)[1]
        else:  # `int rank{(int)blockIdx.y};`, `int rank(blockIdx.y);`
            m = re.search(rf"\b{re.escape(n.spelling)}\s*[({{](.*)", text, re.S)
            init = m.group(1) if m else ""
        # `int64_t tid = blockIdx.x * blockDim.x + threadIdx.x;` then `int rank = tid / chunk;`:
        # computed from the thread's position, directly or through such a local
        geometry = bool(GEOMETRY_INDEX.search(init)) or any(
            (self.cur_func.name, w) in self.geometry_locals for w in re.findall(r"\b\w+\b", init))
        if geometry:
            self.geometry_locals.add((self.cur_func.name, n.spelling))
        if n.spelling.lower() not in RANK_NAMES:
            return
        in_for = n.parent is not None and n.parent.kind == "DECL_STMT" and n.parent.parent is not None \
            and n.parent.parent.kind == "FOR_STMT"
        # `int rank = src_ranks[seg];`: read from a table per element, the source's rank, not ours
        if in_for or geometry or _LOADED_INIT.search(text):
            self.peer_index_vars.add(key)

    def eval(self, n: Node | None) -> tuple[str, str]:
        if n is None:
            return ("unknown", "")
        k = n.kind
        if k in EXPR_WRAPPERS:
            v = self.eval(n.kids[-1]) if n.kids else ("unknown", "")
            if v[0] == "peer_ptr" and k in ("CSTYLE_CAST_EXPR", "CXX_REINTERPRET_CAST_EXPR") \
                    and _POINTER_TO_POINTER.search(n.type.spelling.replace(" ", "")):
                # `reinterpret_cast<const void* const*>(ptrs.data_ptr<int64_t>())`: the address
                # holds the peers' addresses, so indexing it gives one (a table, not a buffer)
                return ("peer_ptr_array", derived(v)[1])
            return v
        if k == "DECL_REF_EXPR":
            if not n.kids or n.kids[0].kind != "OVERLOADED_DECL_REF":
                return self.getv(self.key_of_ref(n))
            return ("unknown", "")
        if k == "MEMBER_REF_EXPR":
            r = n.ref
            if r is not None and r.kind.name == "FIELD_DECL":
                key = self.key_of_decl(r)
                self.fields_by_name.setdefault(r.spelling, key)
                return self.getv(key)
            # `args.ptrs[peer]` in a template kernel over `PtrArray<N>`: the member of a dependent type
            # names no declaration; the field of that name the host code filled is the one meant
            name = (n.spelling or self._dependent_member_name(n)) if r is None else ""
            if name in self.fields_by_name:
                return self.getv(self.fields_by_name[name])
            return ("unknown", "")
        if k == "ARRAY_SUBSCRIPT_EXPR" and len(n.kids) >= 2:
            base = self.eval(n.kids[0])
            if base[0] in ARRAY_KINDS:
                if base[0] == "peer_ptr_array" and self.is_rank_index(n.kids[1]):
                    return ("symm_local", derived(base)[1])
                return (ELEMENT_OF[base[0]], derived(base)[1])
            return ("unknown", "")
        if k == "UNARY_OPERATOR" and n.kids:
            op = self.unary_op(n)
            inner = unwrap(n.kids[0])
            if op == "&":
                if inner.kind == "ARRAY_SUBSCRIPT_EXPR" and inner.kids:
                    return derived(self.eval(inner.kids[0]))
                return ("unknown", "")
            if op == "*":
                base = self.eval(n.kids[0])
                if base[0] in ARRAY_KINDS:
                    return (ELEMENT_OF[base[0]], derived(base)[1])
                return ("unknown", "")
            if op in ("++", "--", "+"):
                return self.eval(n.kids[0])
            return ("unknown", "")
        if k == "BINARY_OPERATOR" and len(n.kids) == 2:
            op = self.binop(n)
            if op in ("Add", "Sub", "Or"):
                a, b = self.eval(n.kids[0]), self.eval(n.kids[1])
                if op == "Sub" and a[0] != "unknown" and b[0] != "unknown":
                    return ("unknown", "")  # pointer difference is a number
                return derived(join_kinds(a, b))
            if op == "Comma":
                return self.eval(n.kids[1])
            if op == "Assign":
                return self.eval(n.kids[1])
            return ("unknown", "")
        if k == "CONDITIONAL_OPERATOR" and len(n.kids) == 3:
            # `use_multimem ? local : peer`: on the run only the arm its multicast test picks flows
            taken = cuda_branches.decided_on_run(self.text_of(n.kids[0]), self.run_flags())
            if taken is not None:
                return derived(self.eval(n.kids[1] if taken else n.kids[2]))
            return derived(join_kinds(self.eval(n.kids[1]), self.eval(n.kids[2])))
        if k == "CALL_EXPR":
            return self.eval_call(n)
        return ("unknown", "")

    def eval_call(self, n: Node) -> tuple[str, str]:
        name = n.spelling
        obj = self.call_object(n)
        if name in DATA_PTR_METHODS and obj is not None:
            v = self.eval(obj)
            if v[0] == "peer_tensor":
                return ("peer_ptr", derived(v)[1])
            return derived(v)
        if name in TENSOR_VIEW_METHODS and obj is not None:
            return derived(self.eval(obj))
        if name in ("tensor", "from_blob") and obj is None:
            # `torch::tensor(peer_ptrs, torch::kInt64)`: a device copy of a host table of addresses
            args = self.call_args(n)
            return derived(self.eval(args[0])) if args else ("unknown", "")
        if name == "operator[]":
            args = self.call_args(n)
            if len(args) >= 2:
                base = self.eval(args[0])
                if base[0] in ARRAY_KINDS:
                    if base[0] == "peer_ptr_array" and self.is_rank_index(args[1]):
                        return ("symm_local", derived(base)[1])
                    return (ELEMENT_OF[base[0]], derived(base)[1])
            return ("unknown", "")
        op, args = dependent_operator(n)
        if op in ("operator+", "operator-"):
            # in a template, `reinterpret_cast<const T*>(ptrs[peer]) + off` has a dependent type and
            # clang keeps it as an unresolved operator call: pointer arithmetic all the same
            name = op
            if len(args) == 2:
                a, b = self.eval(args[0]), self.eval(args[1])
                if name == "operator-" and a[0] != "unknown" and b[0] != "unknown":
                    return ("unknown", "")
                return derived(join_kinds(a, b))
            return ("unknown", "")
        if name == "nvshmem_ptr":
            return ("nvshmem_ptr", "dataflow")
        if name in ("nvshmem_malloc", "nvshmem_align", "nvshmem_calloc"):
            return ("symm_local", "dataflow")
        if name in TORCH_ALLOC and self.cur_func is not None and self.cur_func.kind == "host":
            return ("local", "dataflow")
        if self.is_constructor(n):
            args = self.call_args(n)
            if len(args) == 1:
                return self.eval(args[0])  # copy / conversion
            return ("unknown", "")
        name = name or dependent_callee(n)
        if name in self.ret:
            return derived(self.ret[name])
        return ("unknown", "")

    def apply_seeds(self) -> None:
        for name, kinds in self.seeds.items():
            fname = self.facts.bindings.get(name, name)
            for f in self.by_name.get(fname, []):
                for i, p in enumerate(f.params):
                    if i < len(kinds) and kinds[i] and kinds[i] != "unknown":
                        self.setv(self.key_of_decl(p.c), (kinds[i], "seed"))

    def flow(self) -> None:
        for _ in range(8):
            self.changed = False
            for f in self.funcs:
                self.cur_func = f
                for n in f.body.walk():
                    self.flow_node(n)
            if not self.changed:
                break
        self.cur_func = None

    def lvalue_target(self, n: Node) -> tuple[str, tuple | None]:
        """('var'|'elem', key) for the thing an assignment writes."""
        s = unwrap(n)
        if s.kind == "DECL_REF_EXPR":
            return "var", self.key_of_ref(s)
        if s.kind == "MEMBER_REF_EXPR":
            r = s.ref
            return "var", self.key_of_decl(r) if r is not None else None
        if s.kind == "ARRAY_SUBSCRIPT_EXPR" and s.kids:
            kind, key = self.lvalue_target(s.kids[0])
            return "elem", key
        if s.kind == "CALL_EXPR" and s.spelling == "operator[]":
            args = self.call_args(s)
            if args:
                kind, key = self.lvalue_target(args[0])
                return "elem", key
        return "var", None

    def assign(self, lhs: Node, val: tuple[str, str]) -> None:
        if val[0] == "unknown":
            return
        kind, key = self.lvalue_target(lhs)
        if kind == "elem":
            arr = ARRAY_OF.get(val[0], val[0])
            self.setv(key, derived((arr, val[1])))
        else:
            self.setv(key, derived(val))

    def flow_node(self, n: Node) -> None:
        k = n.kind
        if k == "VAR_DECL":
            key = self.key_of_decl(n.c)
            self.var_nodes[key] = n
            self.note_peer_index(n, key)
            exprs = [ch for ch in n.kids if ch.kind not in ("TYPE_REF", "NAMESPACE_REF", "TEMPLATE_REF")
                     and not ch.kind.endswith("_ATTR")]
            tkind = n.type.kind.name
            if tkind in ("CONSTANTARRAY", "INCOMPLETEARRAY") and self.cur_func and self.cur_func.kind != "host":
                if "*" not in n.type.spelling:
                    self.setv(key, ("local", "dataflow"))  # shared / register arrays
            if not exprs:
                return
            init = exprs[-1]
            if init.kind == "INIT_LIST_EXPR":
                v = ("unknown", "")
                for el in init.kids:
                    v = join_kinds(v, self.eval(el))
                if v[0] != "unknown":
                    self.setv(key, derived((ARRAY_OF.get(v[0], v[0]), v[1])))
                return
            if init.kind == "CALL_EXPR" and init.spelling in ("atomic_ref",) or "atomic_ref" in n.type.spelling:
                args = self.call_args(init) if init.kind == "CALL_EXPR" else []
                if args:
                    self.atomic_refs[key] = (args[0], n.type.spelling)
                return
            if init.kind == "CALL_EXPR" and self.is_constructor(init) and "vector" in n.type.spelling:
                return
            self.setv(key, derived(self.eval(init)))
        elif k == "BINARY_OPERATOR" and len(n.kids) == 2 and self.binop(n) == "Assign":
            self.assign(n.kids[0], self.eval(n.kids[1]))
        elif k == "COMPOUND_ASSIGNMENT_OPERATOR" and len(n.kids) == 2:
            if n.spelling in ("+=", "-=") or self.text_of(n).find("+=") >= 0:
                v = self.eval(n.kids[0])
                if v[0] != "unknown":
                    self.assign(n.kids[0], v)
        elif k == "RETURN_STMT" and n.kids and self.cur_func is not None:
            v = self.eval(n.kids[0])
            if v[0] != "unknown":
                old = self.ret.get(self.cur_func.name, ("unknown", ""))
                new = join_kinds(old, derived(v))
                if new != old:
                    self.ret[self.cur_func.name] = new
                    self.changed = True
        elif k == "CALL_EXPR":
            self.flow_call(n)

    def flow_call(self, n: Node) -> None:
        name = n.spelling
        obj = self.call_object(n)
        if name in ("push_back", "emplace_back", "push") and obj is not None:
            args = n.kids[1:]
            if args:
                v = self.eval(args[0])
                if v[0] != "unknown":
                    _, key = self.lvalue_target(obj)
                    self.setv(key, derived((ARRAY_OF.get(v[0], v[0]), v[1])))
            return
        if self.is_launch(n):
            fname = n.spelling
            args = n.kids[2:]
            self.bind_args(fname, args)
            return
        if name in LAUNCH_APIS:
            kname, args = self.launch_api_parts(n)
            if kname:
                self.bind_args(kname, args)
            return
        args = self.call_args(n)
        if name == "copy_" and obj is not None and args:
            # `ptrs_tensor.copy_(torch::tensor(peer_ptrs))`: the tensor now holds what was copied in
            v = self.eval(args[0])
            if v[0] in ARRAY_KINDS:
                self.assign(obj, v)
            return
        if name in ("cudaMemcpy", "cudaMemcpyAsync") and len(args) >= 2:
            v = self.eval(args[1])
            if v[0] in ARRAY_KINDS:
                self.assign(args[0], v)
            return
        if name in ("cudaIpcOpenMemHandle", "cudaMalloc", "cudaMallocAsync", "cudaMallocManaged") and args:
            tgt = unwrap(args[0])
            if tgt.kind == "UNARY_OPERATOR" and tgt.kids:
                kind = "peer_ptr" if name == "cudaIpcOpenMemHandle" else "local"
                self.assign(tgt.kids[0], (kind, "dataflow"))
            return
        if name in self.by_name and not name.startswith("operator"):
            self.bind_args(name, args)
        elif not name and dependent_callee(n) in self.by_name:
            self.bind_args(dependent_callee(n), n.kids[1:])

    @staticmethod
    def _dependent_member_name(n: Node) -> str:
        """The member a dependent `x.ptrs` names (libclang spells it empty): its last token."""
        try:
            tokens = [t.spelling for t in n.c.get_tokens()]
        except Exception:  # noqa: BLE001 - a cursor without tokens names nothing
            return ""
        return tokens[-1] if len(tokens) >= 3 and tokens[-2] in (".", "->") and tokens[-1].isidentifier() else ""

    def bind_args(self, fname: str, args: list[Node]) -> None:
        for f in self.resolve(fname, len(args)):
            for i, a in enumerate(args[: len(f.params)]):
                v = self.eval(a)
                if v[0] != "unknown":
                    self.setv(self.key_of_decl(f.params[i].c), derived(v))

    def apply_name_fallback(self) -> None:
        for f in self.funcs:
            decls = list(f.params) + [n for n in f.body.walk() if n.kind == "VAR_DECL"]
            for d in decls:
                key = self.key_of_decl(d.c)
                if self.getv(key)[0] != "unknown":
                    continue
                try:
                    g = guess_kind(d.spelling, d.type.spelling, d.type.kind.name)
                except Exception:
                    g = ""
                if g:
                    self.setv(key, (g, "name"))
        # struct fields too (kernel argument structs)
        for f in self.funcs:
            for n in f.body.walk():
                if n.kind == "MEMBER_REF_EXPR":
                    r = n.ref
                    if r is not None and r.kind.name == "FIELD_DECL":
                        key = self.key_of_decl(r)
                        self.fields_by_name.setdefault(r.spelling, key)
                        if self.getv(key)[0] == "unknown":
                            g = guess_kind(r.spelling, r.type.spelling, r.type.kind.name)
                            if g:
                                self.setv(key, (g, "name"))

    def kind_by_text(self, expr: str) -> str:
        m = re.search(r"[A-Za-z_]\w*", expr)
        if not m:
            return "unknown"
        name = m.group(0)
        for key, val in self.env.items():
            if key[1] == name:
                return val[0]
        return "unknown"
