"""Exception or log text -> (outcome, subtype), in the TAXONOMY's words.

Build failures are told apart from runtime failures by where they came from (the worker tags
exceptions raised inside a JIT build) and by the compiler's text; the subtype comes from the
first compiler message that matches a known pattern.
"""

from __future__ import annotations

import re

# Compiler text -> subtype, checked in order (the most specific first).
_COMPILE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "missing_header",
        re.compile(
            r"fatal error: .*(No such file or directory|file not found)|cannot open source file",
            re.I,
        ),
    ),
    (
        "arch_unsupported",
        re.compile(
            r"unsupported gpu architecture|is not supported on|requires (a )?(target )?sm_\d+"
            r"|not supported (for|on) \.?target|Feature '[^']*' requires|requires --gpu-architecture"
            r"|no kernel image is available",
            re.I,
        ),
    ),
    (
        "undefined_symbol",
        re.compile(r"undefined symbol|undefined reference to|unresolved external", re.I),
    ),
    (
        "undeclared_identifier",
        re.compile(
            r"identifier \"[^\"]+\" is undefined|was not declared in this scope|undeclared identifier"
            r"|use of undeclared|is not a member of|has no member|is not defined",
            re.I,
        ),
    ),
    (
        "type_mismatch",
        re.compile(
            r"no suitable (user-defined )?(conversion|constructor)|cannot be used to initialize|is incompatible with"
            r"|invalid conversion from|cannot convert|no instance of (overloaded )?function"
            r"|no matching function for call|a value of type .* cannot be|invalid operands"
            r"|incompatible type"
            # ptxas refusing an instruction's operand type (e.g. .f32 for multimem.ld_reduce's .max)
            r"|Incorrect type '[^']*' for (operation|instruction)|Arguments mismatch for instruction",
            re.I,
        ),
    ),
    (
        # Triton's front end refusing the kernel's Python (a construct it does not compile)
        "triton_syntax",
        re.compile(r"unsupported AST node type|UnsupportedLanguageConstruct|unsupported language construct", re.I),
    ),
    (
        "cuda_syntax",
        # ... and source that nvcc accepts only with a flag the helper does not pass (--extended-lambda)
        re.compile(r"expected an? |expected '|syntax error|error: expected|unexpected token"
                   r"|requires --extended-lambda|requires the --extended-lambda", re.I),
    ),
)

_BUILD_MARKERS = re.compile(
    r"Error building extension|ninja: build stopped|nvcc fatal|error: command .*nvcc"
    r"|CompileException|NVRTC_ERROR|nvrtc: error|CompilationError|ptxas (fatal|error)",
    re.I,
)

# Runtime text -> subtype, checked in order. NCCL/gloo errors are often the echo of another
# rank's crash, so they come after the causes they echo.
_RUNTIME_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("illegal_address", re.compile(r"illegal memory access|ILLEGAL_ADDRESS|illegal address", re.I)),
    ("misaligned_address", re.compile(r"misaligned address|MISALIGNED_ADDRESS", re.I)),
    (
        "launch_config",
        re.compile(
            r"invalid configuration argument|too many resources requested for launch"
            r"|OutOfResources|out of resource|INVALID_CONFIGURATION|invalid device function",
            re.I,
        ),
    ),
    (
        "out_of_memory",
        re.compile(r"out of memory|OutOfMemoryError|CUDA_ERROR_OUT_OF_MEMORY|can't allocate memory|Cannot allocate memory", re.I),
    ),
    ("device_assert", re.compile(r"device-side assert", re.I)),
    (
        "rendezvous_error",
        re.compile(
            r"rendezvous|RendezvousError|TCPStore|DistStoreError|Duplicate GPU detected"
            r"|overlapping devices",
            re.I,
        ),
    ),
    (
        "nccl_error",
        re.compile(
            r"NCCL|DistBackendError|ProcessGroupGloo|gloo|Connection closed by peer"
            r"|Connection reset by peer|Broken pipe",
            re.I,
        ),
    ),
)

# Which runtime subtype best explains a multi-rank failure (first wins).
RUNTIME_PRIORITY = (
    "illegal_address",
    "misaligned_address",
    "launch_config",
    "out_of_memory",
    "device_assert",
    "binding_mismatch",
    "python_exception",
    "rendezvous_error",
    "nccl_error",
    "",
)


def compile_subtype(text: str) -> str:
    """The subtype of a build failure from the compiler's text ('' when nothing matches)."""
    # The compiler's own `error` lines say the cause; a note on a later line must not win.
    error_lines = [ln for ln in text.splitlines() if re.search(r"error|fatal|undefined", ln, re.I)]
    for lines in (error_lines, text.splitlines()):
        chunk = "\n".join(lines)
        for subtype, pattern in _COMPILE_PATTERNS:
            if pattern.search(chunk):
                return subtype
    return ""


def looks_like_build_failure(text: str) -> bool:
    return bool(_BUILD_MARKERS.search(text))


def runtime_subtype(text: str) -> str:
    for subtype, pattern in _RUNTIME_PATTERNS:
        if pattern.search(text):
            return subtype
    return ""


def mark_during_build(exc: BaseException) -> None:
    """Note on `exc` that it escaped a JIT build, so classify_exception reads it as a compile error."""
    try:
        exc.pkb_during_build = True  # type: ignore[attr-defined]
    except Exception:  # an exception type that takes no attributes
        pass


def classify_exception(exc: BaseException, *, during_build: bool = False, phase: str = "") -> tuple[str, str]:
    """(outcome, subtype) for an exception raised while loading or calling a candidate."""
    text = _exception_text(exc)
    name = type(exc).__name__
    if isinstance(exc, SyntaxError):  # includes IndentationError, TabError
        return "compile_error", "python_syntax"
    # Triton's compile errors subclass its CompilationError (UnsupportedLanguageConstruct, ...)
    compile_classes = {c.__name__ for c in type(exc).__mro__} & {"CompilationError", "CompileException"}
    if during_build or looks_like_build_failure(text) or compile_classes:
        return "compile_error", compile_subtype(text)
    if isinstance(exc, ImportError):
        # A compiled module that does not link is a build defect, not a missing package.
        if re.search(r"undefined symbol", text):
            return "compile_error", "undefined_symbol"
        return "compile_error", "import_error"
    if name == "OutOfMemoryError":
        return "runtime_error", "out_of_memory"
    if isinstance(exc, TypeError) and _BINDING_HEAD.search(str(exc)):
        return "runtime_error", "binding_mismatch"
    subtype = runtime_subtype(text)
    if subtype in ("nccl_error", "rendezvous_error") and not _is_distributed_error(exc, text):
        # A plain Python error that merely mentions gloo/NCCL in its message.
        subtype = "python_exception"
    if not subtype:
        subtype = "python_exception"
    return "runtime_error", subtype


def _is_distributed_error(exc: BaseException, text: str) -> bool:
    name = type(exc).__name__
    if name in ("DistBackendError", "DistError", "DistNetworkError", "DistStoreError"):
        return True
    # torch raises RuntimeError for gloo transport failures and NCCL errors.
    return isinstance(exc, RuntimeError) and bool(
        re.search(r"NCCL|gloo|Connection closed by peer|TCPStore|rendezvous|symmetric", text, re.I)
    )


def _exception_text(exc: BaseException) -> str:
    parts = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        parts.append(f"{type(cur).__name__}: {cur}")
        cur = cur.__cause__ or cur.__context__
    return "\n".join(parts)


# ---- pybind11 binding mismatches ------------------------------------------------------------------
# A bound extension function called with arguments its C++ signature does not take raises
#   TypeError: f(): incompatible function arguments. The following argument types are supported:
#       1. (arg0: torch.Tensor, arg1: int) -> None
#   Invoked with: tensor([...]), 1403...
# (e.g. `handle.signal_pad_ptrs_dev`, an int in torch, passed where `torch::Tensor` is declared).

_BINDING_HEAD = re.compile(r"(?P<fn>[\w.]+)\(\): incompatible function arguments")
_OVERLOAD = re.compile(r"^\s*\d+\.\s*\((?P<params>.*)\)\s*->\s*(?P<ret>.+?)\s*$")


def error_extras(subtype: str, exc: BaseException) -> dict[str, object]:
    """What a rank's error record carries beyond its class and message, the same on real and on
    emulated ranks: for a binding mismatch, the declared and the passed types."""
    if subtype == "binding_mismatch":
        return {"binding": binding_details(str(exc))}
    return {}


def binding_details(message: str) -> dict[str, object] | None:
    """The function, its declared overloads and the types it was given, from pybind11's message;
    `mismatches` pairs each argument whose type the closest overload does not take."""
    head = _BINDING_HEAD.search(message)
    if head is None:
        return None
    lines = message.splitlines()
    overloads = []
    for line in lines:
        m = _OVERLOAD.match(line)
        if m:
            params = []
            for part in _split_top(m.group("params")):
                pname, _, ptype = part.partition(":")
                params.append({"name": pname.strip(), "type": ptype.split("=")[0].strip() if ptype else "object"})
            overloads.append({"params": params, "returns": m.group("ret")})
    invoked = message.split("Invoked with:", 1)[1].strip() if "Invoked with:" in message else ""
    kwargs_text = ""
    if "; kwargs:" in invoked:
        invoked, kwargs_text = invoked.split("; kwargs:", 1)
    passed = [_repr_type(a) for a in _split_top(invoked)] if invoked else []
    best: dict[str, object] | None = None
    for ov in overloads:
        declared = [p["type"] for p in ov["params"]]
        bad = [
            {"arg": i, "name": ov["params"][i]["name"], "declared": d, "passed": t}
            for i, (d, t) in enumerate(zip(declared, passed))
            if not _accepts(d, t)
        ]
        arity = len(declared) != len(passed)
        score = (arity, len(bad))
        if best is None or score < best["_score"]:  # type: ignore[operator]
            best = {"_score": score, "mismatches": bad, "arity_differs": arity}
    out: dict[str, object] = {
        "function": head.group("fn"),
        "declared": ["(" + ", ".join(f"{p['name']}: {p['type']}" for p in ov["params"]) + f") -> {ov['returns']}" for ov in overloads],
        "passed": passed,
    }
    if kwargs_text.strip():
        out["passed_kwargs"] = kwargs_text.strip()[:200]
    if best is not None:
        out["mismatches"] = best["mismatches"]
        if best["arity_differs"]:
            out["arity_differs"] = True
    return out


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets and quotes."""
    parts, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def _repr_type(text: str) -> str:
    t = text.strip()
    if t.startswith(("tensor(", "Parameter containing")):
        return "torch.Tensor"
    if t in ("True", "False"):
        return "bool"
    if t == "None":
        return "None"
    if re.fullmatch(r"-?\d+", t):
        return "int"
    if re.fullmatch(r"-?(\d+\.\d*|\.\d+|\d+)(e[-+]?\d+)?|nan|inf|-inf", t):
        return "float"
    if t[:1] in "'\"":
        return "str"
    if t.startswith("["):
        return "list"
    if t.startswith("("):
        return "tuple"
    if t.startswith("{"):
        return "dict"
    m = re.match(r"<([\w.]+)", t)
    return m.group(1) if m else "object"


def _accepts(declared: str, passed: str) -> bool:
    d = declared.replace("typing.", "").strip()
    if d in ("object", "Any", ""):
        return True
    if passed == "None":
        return "None" in d or d.startswith("Optional")
    d = re.sub(r"^Optional\[(.*)\]$", r"\1", d).replace(" | None", "")
    compatible = {
        "torch.Tensor": {"torch.Tensor"},
        "at::Tensor": {"torch.Tensor"},
        "int": {"int", "bool"},
        "float": {"float", "int"},
        "bool": {"bool"},
        "str": {"str"},
    }
    if d in compatible:
        return passed in compatible[d]
    if re.match(r"(list|List|Sequence|tuple|Tuple)\b", d):
        return passed in ("list", "tuple")
    return passed.split(".")[-1].lower() in d.lower()
