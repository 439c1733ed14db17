"""Whether code computes, for the overlap labels: a kernel body with multiply-accumulate,
normalisation or tensor-core arithmetic (not a collective's own reduction and average, not
address arithmetic), and the lines of solution()'s matmuls.

Pure functions over source lines and the parsed file.
"""

from __future__ import annotations

import ast
import re

from analyzer.brackets import closing
from analyzer.cuda_text import split_top
from pkb.record import CandidateRecord


def torch_matmul_lines(rec: CandidateRecord, py) -> list[int]:
    """Lines of `a @ b` in solution() and the functions its timed path calls."""
    tree = rec.syntax_tree()
    if tree is None or not re.search(r"[\w)\]][ \t]*@=?[ \t]*[\w(]", rec.source):  # no `a @ b` anywhere (decorators are not one)
        return []
    timed = {c.function for c in py.calls if c.path == "timed"} | {"solution"}
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name in timed:
            for n in ast.walk(fn):
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult):
                    out.append(n.lineno)
    return sorted(out)


# Arithmetic beyond a collective's own reduction: products, transcendental functions, tensor-core
# instructions. `sum += peer[i]` (adding peers' values) is the collective itself, not computation,
# and neither is index arithmetic (`idx += blockDim.x * gridDim.x`).
_COMPUTE_RE = re.compile(
    r"\bfmaf?\s*\(|__fmaf?_|__fmul|__hmul|__hfma|rsqrtf?\s*\(|sqrtf?\s*\(|\bexpf?\s*\(|__expf|exp2f\s*\(|\blogf?\s*\(|__logf"
    r"|\btanhf?\s*\(|__popcl{0,2}\s*\(|\b(sin|cos)f?\s*\(|__(sin|cos)f|wmma|mma\.sync|wgmma|\bmma\b|cublas"
)
_INDEX_WORDS = re.compile(r"blockIdx|blockDim|threadIdx|gridDim|sizeof|stride|offset|\bidx\b|_idx\b|\btid\b|lane|warp|"
                          r"\.(batch|depth|rows|cols)\(\)|"
                          r"\b(int|int64_t|int32_t|uint32_t|uint64_t|size_t|long|unsigned)\b|_ptrs?\b|\bptr\b|\bn_|num_|rank|world|"
                          r"\bpid|BLOCK|program_id|arange|_SIZE|\bstart\b|\bbase\b")
_VALUE_PRODUCT = re.compile(r"[\w\])]\s*[*/]\s*[\w(]")


# An integer variable's declaration (`uint32_t i1 = temp % N1;`, a parameter `uint32_t chunk0,`):
# arithmetic among such names picks an address or a peer, it computes no value of the data.
_INT_TYPE = r"(?:unsigned\s+)?(?:long\s+long|int|long|short|unsigned|size_t|u?int(?:8|16|32|64)_t)"
_INT_DECL = re.compile(rf"\b{_INT_TYPE}\s+(?:const\s+)?(\w+)\s*(?=[;=,)])")
_TYPE_WORDS = re.compile(rf"^(?:{_INT_TYPE}|const|static_cast|reinterpret_cast|float|double)$")


def integer_names(body_lines: list[str]) -> frozenset[str]:
    """Names declared with an integer type in a kernel's signature and body."""
    return frozenset(m.group(1) for line in body_lines for m in _INT_DECL.finditer(line.split("//")[0]))


def line_computes(line: str, integers: frozenset[str] = frozenset()) -> bool:
    code = line.split("//")[0]
    if _COMPUTE_RE.search(code):
        return True
    # A product or quotient of values (`acc += a * b`, `float y = x * inv_rms`), not of indices:
    # products inside subscripts (`out[row * H + col] = src[row * w + h]`) and pointer arithmetic
    # (`T* dst = out + start * hidden`, `reinterpret_cast<...>(src + off * n)`) address, not compute.
    if "=" not in code or code.strip().startswith(("#", "for", "if", "return")):
        return False
    lhs, rhs = code.split("=", 1)
    if re.search(r"\w\s*\*\s*(?:__restrict__\s+)?\w+\s*$", lhs.strip()) or "reinterpret_cast<" in rhs:
        return False
    while re.search(r"\[[^\[\]]*\]", rhs):
        rhs = re.sub(r"\[[^\[\]]*\]", "", rhs)
    while re.search(r"\[[^\[\]]*\]", lhs):  # `out[(int64_t)peer * P + i] = ...`: the store's address
        lhs = re.sub(r"\[[^\[\]]*\]", "", lhs)
    # `sum * inv_ws`, `sum / world_size`: the average a reduce with AVG ends in, the collective's own
    rhs = _AVERAGE.sub("", rhs)
    # `r = i1 / chunk0`: every operand an integer variable or a literal, an index computed
    operands = [w for w in re.findall(r"\b[A-Za-z_]\w*\b(?!\s*[(<])", rhs) if not _TYPE_WORDS.match(w)]
    if integers and operands and all(w in integers for w in operands):
        return False
    # index words inside the subscripts (`a[in_idx] * w[w_idx]`) address the operands; only
    # those left outside them make the product index arithmetic
    return bool(_VALUE_PRODUCT.search(rhs)) and not _INDEX_WORDS.search(lhs + "=" + rhs)


# A factor of one over the world size: a collective's averaging, not computation on the data.
_WORLD = r"(?:ws|world|world_size|nranks|n_ranks|num_ranks)"
_AVERAGE = re.compile(rf"\*\s*\(?\s*(?:inv_?{_WORLD}|rcp_?{_WORLD}|1(?:\.0?f?)?\s*/\s*(?:\(float\)\s*)?{_WORLD})\b\s*\)?"
                      rf"|/\s*\(?\s*(?:\(float\)\s*|\(double\)\s*|static_cast<float>\()?{_WORLD}\b\s*\)?\)?")


# A statement carried on to the next line: `acc += to_float(a[i]) *` / `    to_float(w[j]);`.
_CONTINUED = re.compile(r"[-+*/(,=]\s*$")
# A kernel whose body only thread 0 of block 0 runs: arithmetic on a scalar (the root of a
# reduced sum), nothing another part of the kernel could overlap.
_ONE_THREAD = re.compile(r"^[^{]*\{\s*if\s*\(\s*(threadIdx\.x\s*==\s*0\s*&&\s*blockIdx\.x\s*==\s*0"
                         r"|blockIdx\.x\s*==\s*0\s*&&\s*threadIdx\.x\s*==\s*0)\s*\)\s*\{", re.S)


# `dst = seed_inverse_ids[row];`: a destination read from an index array (a scatter's target).
_GATHERED_INDEX = re.compile(r"\b(\w+)\s*=\s*(?:\([\w\s]+\)\s*)?\w+\s*\[[^\]]+\]\s*;")
_ASSIGNMENT = re.compile(r"\b(\w+)\s*=(?!=)\s*([^;]+);")
_ATOMIC_ADD = re.compile(r"\batomicAdd\w*\s*\(")


def scatter_adds(joined: list[str]) -> bool:
    """`atomicAdd(grad + dst * feat + h, v)` with `dst` read from an index array (or `out[idx[i]]`):
    values summed into rows that an index array picks (index_add, a sparse matmul by a 0/1
    matrix) is work a collective does not do, unlike its elementwise sum of peers' values. An
    atomic bump by a constant (`atomicAdd(&cursor[d], 1)`) is a counter, not a sum of values."""
    gathered = {m.group(1) for line in joined for m in _GATHERED_INDEX.finditer(line.split("//")[0])}
    for _ in range(2):  # `dst_ptr = grad_input + dst_row * H;`: an address made from such an index
        gathered |= {m.group(1) for line in joined for m in _ASSIGNMENT.finditer(line.split("//")[0])
                     if set(re.findall(r"\b[A-Za-z_]\w*\b", m.group(2))) & gathered}
    for line in joined:
        code = line.split("//")[0]
        for m in _ATOMIC_ADD.finditer(code):
            end = closing(code, m.end() - 1, "(", ")")
            if end < 0:
                continue
            args = split_top(code[m.end():end], ",")
            if len(args) < 2:
                continue
            address, value = args[0], ",".join(args[1:]).strip()
            if re.fullmatch(r"[-+]?\d+[uUlLfF]*|\(\w+\)\s*\d+", value):
                continue
            if set(re.findall(r"\b[A-Za-z_]\w*\b", address)) & gathered or re.search(r"\[[^\[\]]*\[", address):
                return True
    return False


def kernel_computes(body_lines: list[str]) -> bool:
    """A kernel body with multiply-accumulate, normalisation or tensor-core arithmetic, or a
    scatter-add by key; a statement split over lines is read whole."""
    joined: list[str] = []
    for line in body_lines:
        if joined and _CONTINUED.search(joined[-1].split("//")[0]):
            joined[-1] = joined[-1].split("//")[0].rstrip() + " " + line.strip()
        else:
            joined.append(line)
    integers = integer_names(joined)
    return any(line_computes(line, integers) for line in joined) or scatter_adds(joined)


# `if (threadIdx.x != 0 || blockIdx.x != 0) return;` as the body's first statement: the same
# single thread, written as an early return of all the others.
_OTHERS_RETURN = re.compile(r"^[^{]*\{\s*if\s*\(\s*(threadIdx\.x\s*!=\s*0\s*\|\|\s*blockIdx\.x\s*!=\s*0"
                            r"|blockIdx\.x\s*!=\s*0\s*\|\|\s*threadIdx\.x\s*!=\s*0)\s*\)\s*return\s*;", re.S)


def one_thread(body_lines: list[str]) -> bool:
    """The kernel's body is one `if (threadIdx.x == 0 && blockIdx.x == 0) { ... }`, or every other
    thread returns first."""
    text = "\n".join(body_lines)
    if _OTHERS_RETURN.match(text):
        return True
    m = _ONE_THREAD.match(text)
    if m is None:
        return False
    end = closing(text, m.end() - 1, "{", "}")
    return end >= 0 and text[end + 1:].strip().rstrip("}").strip() == ""
