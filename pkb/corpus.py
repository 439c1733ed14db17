"""Finding candidates on disk and reading them into records.

Reads PKB's own layout as it is: `reference/<id>_<name>.py` beside run trees
`solutions_<backend>_<precision>_<hardware>_<provider>_<model>/<id>_<name>_<backend>.py`, and plain
folders of `.py` files. Reading never raises for a bad file: the record says what was wrong.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from pkb.record import CandidateRecord, content_hash

# Files past this size are not read whole: 5 MB of junk must cost nothing but a record.
MAX_BYTES = 2 * 1024 * 1024

# PKB's generator writes provider names from its model table; `pkb` marks our bundled samples.
KNOWN_PROVIDERS = ("google", "together", "anthropic", "openai", "pkb", "local")
KNOWN_BACKENDS = ("cuda", "triton", "parallelkittens", "cute", "tilelang", "pytorch")
PRECISIONS = ("fp32", "fp16", "bf16", "fp8")

_CANDIDATE_NAME = re.compile(r"^(?P<id>\d+)_(?P<name>.+?)(?:_(?P<backend>[a-z]+))?$")
SKIP_DIRS = {"__pycache__", ".git", ".venv", "node_modules", "reference", "logs"}


@dataclass(frozen=True)
class RunTree:
    """What a PKB run-tree folder name says about how its candidates were generated."""

    name: str
    backend: str = ""
    precision: str = ""
    hardware: str = ""
    provider: str = ""
    model: str = ""


def parse_run_tree(name: str) -> RunTree | None:
    """Split `solutions_<backend>_<precision>_<hardware>_<provider>_<model>`.

    Hardware names may hold underscores (`h100_8`) and model slugs too (`zai-org_GLM-5.1`), so the
    provider token is the anchor: the first known provider after the precision.
    """
    if not name.startswith("solutions_"):
        return None
    parts = name[len("solutions_") :].split("_")
    if len(parts) < 2:
        return RunTree(name=name, backend=parts[0] if parts else "")
    backend, precision, rest = parts[0], parts[1], parts[2:]
    if precision not in PRECISIONS:
        # `solutions_cuda/` (PKB's default folder) or an unknown scheme: keep what is certain.
        return RunTree(name=name, backend=backend)
    for i, tok in enumerate(rest):
        if tok in KNOWN_PROVIDERS and i >= 1:
            return RunTree(
                name=name,
                backend=backend,
                precision=precision,
                hardware="_".join(rest[:i]),
                provider=tok,
                model="_".join(rest[i + 1 :]),
            )
    # No known provider: PKB writes exactly one hardware token unless it has underscores; take
    # the common `<hw>_<provider>_<model>` reading.
    hardware = rest[0] if rest else ""
    provider = rest[1] if len(rest) > 1 else ""
    model = "_".join(rest[2:])
    return RunTree(name, backend, precision, hardware, provider, model)


def parse_candidate_name(stem: str, backend_hint: str = "") -> tuple[int | None, str, str]:
    """`12_allgather_gemm_cuda` -> (12, 'allgather_gemm', 'cuda')."""
    m = _CANDIDATE_NAME.match(stem)
    if not m:
        return None, stem, ""
    pid = int(m.group("id"))
    name, backend = m.group("name"), m.group("backend") or ""
    if backend and backend not in KNOWN_BACKENDS and backend != backend_hint:
        # The last token was part of the problem name (`1_allreduce` has no backend suffix).
        name, backend = f"{name}_{backend}", ""
    return pid, name, backend


def match_record(rec: CandidateRecord, file_id: int | None, file_name: str) -> None:
    """Set the record's problem from its file name and `solution()` parameters against PKB's catalog
    (pkb.problem_match says how); the rule that decided is kept in `rec.problem_match`."""
    from pkb.problem_match import catalog_references, match_problem, solution_params

    params = solution_params(rec.tree) if rec.tree is not None else None
    match = match_problem(file_id, file_name, params, catalog_references(), "catalog")
    rec.problem_match = match.to_data()
    rec.problem_id = match.id
    rec.problem_name = match.name or file_name


def assign_problem(rec: CandidateRecord, problem_id: int) -> None:
    """--problem ID: the user says which problem the file answers; the record keeps what its name said."""
    from pkb.problem_match import catalog_references, given

    old = rec.problem_match or {}
    match = given(problem_id, catalog_references(), old.get("file_id", rec.problem_id), old.get("file_name", rec.problem_name), old.get("params"))
    rec.problem_match = match.to_data()
    rec.problem_id, rec.problem_name = problem_id, match.name or rec.problem_name


def discover(root: Path) -> list[Path]:
    """Candidate files under `root` (a file or a folder), in a stable order.

    `reference/` folders hold references, not candidates, and are skipped, as are caches; in a
    PKB checkout only the run trees (`solutions_*`) are walked.
    """
    root = Path(root)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such file or folder")
    out: list[Path] = []
    harness = is_pkb_checkout(root)
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIP_DIRS or part.startswith(".") for part in rel.parts[:-1]):
            continue
        if harness and not rel.parts[0].startswith("solutions_"):
            continue  # PKB's own harness (run_local.py, utils/, kernelgen/ ...), not a candidate
        if path.is_file() and (path.suffix == ".py" or _is_candidate_like(path)):
            out.append(path)
    return out


def is_pkb_checkout(folder: Path) -> bool:
    """A ParallelKernelBench checkout: run trees beside PKB's harness (its run_local.py or
    utils/cuda_helpers.py). Its candidates are the run trees' files; the harness is not one."""
    if not ((folder / "run_local.py").is_file() or (folder / "utils" / "cuda_helpers.py").is_file()):
        return False
    return any(p.is_dir() and p.name.startswith("solutions_") for p in folder.iterdir())


def _is_candidate_like(path: Path) -> bool:
    # A junk file named like a candidate without .py still deserves a record in a run tree.
    return path.parent.name.startswith("solutions_") and path.suffix == ""


def read_candidate(path: Path, root: Path | None = None, max_bytes: int | None = None) -> CandidateRecord:
    """Read one file into a record; the record says how reading went. `path` is kept relative to
    `root` (pkb.roots.corpus_root); `max_bytes` is the read limit (default MAX_BYTES)."""
    raw = read_file(path, root, max_bytes)
    return decode_file(raw)


@dataclass
class FileRead:
    """A file's bytes and what its name says, before decoding: enough to look a finished result up
    by content (the bytes are read once, for the hash and the decoding both)."""

    rec: CandidateRecord  # name fields, size and sha256 set; parse_status set where reading failed
    data: bytes | None  # None: unreadable or over the limit (the record says which)
    file_id: int | None
    file_name: str


def read_file(path: Path, root: Path | None = None, max_bytes: int | None = None) -> FileRead:
    """The first half of read_candidate: the name fields, the bytes and their sha256."""
    from pkb.roots import relative_path

    path = Path(path)
    limit = max_bytes or MAX_BYTES
    rel = relative_path(path, Path(root).resolve()) if root is not None else str(path)
    rec = CandidateRecord(path=rel)
    tree = parse_run_tree(path.parent.name)
    if tree is not None:
        rec.run_tree = tree.name
        rec.backend, rec.precision, rec.hardware = tree.backend, tree.precision, tree.hardware
        rec.provider, rec.model = tree.provider, tree.model
    pid, name, backend = parse_candidate_name(path.stem, rec.backend)
    rec.problem_id, rec.problem_name = pid, name
    if backend and not rec.backend:
        rec.backend = backend

    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        rec.parse_status, rec.parse_message = "unreadable", f"cannot read: {exc.strerror or exc}"
        return FileRead(rec, None, pid, name)
    rec.size = size
    rec.sha256 = content_hash(data)
    if size > limit:
        rec.parse_status = "too_large"
        rec.parse_message = f"{size} bytes, over the {limit}-byte limit; not analyzed"
        return FileRead(rec, None, pid, name)
    return FileRead(rec, data, pid, name)


def decode_file(raw: FileRead) -> CandidateRecord:
    """The second half of read_candidate: decode and parse the bytes, match the problem."""
    rec = raw.rec
    if raw.data is not None:
        rec.parse_status, rec.parse_message, rec.parse_line, rec.source, rec.tree = _decode(raw.data)
    match_record(rec, raw.file_id, raw.file_name)
    return rec


def decode_python(data: bytes) -> tuple[str, str, int, str]:
    """(status, message, line, text) for bytes that should be a Python file."""
    return _decode(data)[:4]


def _decode(data: bytes) -> tuple[str, str, int, str, ast.Module | None]:
    """decode_python, plus the syntax tree it parsed (kept so later stages need not parse again)."""
    if not data.strip():
        return "empty", "the file is empty", 0, "", None
    if b"\x00" in data:
        return "not_python", "binary content (NUL bytes); not a Python file", 0, "", None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        return "not_utf8", f"not UTF-8 at byte {exc.start} (line {line}): {exc.reason}", line, "", None
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        line = exc.lineno or 0
        # Mostly-unprintable text that happens to decode is junk, not Python with a typo.
        printable = sum(ch.isprintable() or ch in "\n\t\r" for ch in text[:4096])
        if printable < 0.9 * min(len(text), 4096):
            return "not_python", "not Python source (mostly unprintable characters)", 0, text, None
        return "syntax_error", f"line {line}: {exc.msg}", line, text, None
    except ValueError as exc:  # e.g. source code string cannot contain null bytes
        return "not_python", str(exc), 0, text, None
    except (RecursionError, SystemError, MemoryError):
        # CPython's parser gives up on very deep nesting (3.11 reports it as a SystemError).
        return "syntax_error", "nested too deeply for Python's parser", 0, text, None
    return "ok", "", 0, text, tree


def load_corpus(root: Path) -> list[CandidateRecord]:
    """Every candidate under `root`, paths relative to its corpus root (pkb.roots)."""
    from pkb.roots import corpus_root

    root = Path(root)
    base = corpus_root([root])
    return [read_candidate(p, base) for p in discover(root)]
