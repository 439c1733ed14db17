"""The one record type that carries a candidate through every stage.

load (pkb.corpus) -> static facts (analyzer passes) -> labels and findings (analyzer.classify,
analyzer.rules) -> evaluation (pkb.eval) -> profile (profiling) -> diagnosis -> reports.
Each stage fills its own fields and leaves the others alone; nothing downstream re-reads the file.
Each part is stored as it is produced (pkb.store: the static line, the evaluation, the profile,
the diagnosis), and the views read the record back from there (CandidateRecord.from_json_line).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from pkb.facts import StaticFacts
from pkb import taxonomy
from pkb.serde import from_data, to_data

# The version of the public record shape (static.jsonl, eval.jsonl, docs/record.schema.json):
# raised when a field changes meaning or is removed, not when one is added.
SCHEMA_VERSION = 1

# How reading the file went.
PARSE_STATUSES = (
    "ok",
    "empty",  # zero bytes or only whitespace
    "not_utf8",  # bytes that do not decode as UTF-8
    "not_python",  # decodes but is not Python (binary junk, NUL bytes)
    "syntax_error",  # Python that does not parse
    "too_large",  # over the size limit (the file is not read past it)
    "unreadable",  # I/O error
)


@dataclass
class Evidence:
    file: str
    line: int
    snippet: str
    pass_name: str  # one of taxonomy.PASSES
    note: str = ""

    def __post_init__(self) -> None:
        taxonomy.check_pass(self.pass_name)


@dataclass
class Label:
    axis: str  # mechanism | sync | overlap | ordering
    value: str
    evidence: list[Evidence] = field(default_factory=list)

    def __post_init__(self) -> None:
        taxonomy.check_label(self.axis, self.value)


@dataclass
class Finding:
    rule: str  # PKBnnn
    name: str  # the rule's short name (kebab case)
    severity: str
    message: str
    file: str
    line: int
    snippet: str = ""
    kernel: str = ""  # kernel or function the finding is about, where there is one
    pass_name: str = "python"
    # other lines of the same defect, such as the other end of a race (SARIF's related locations)
    related_lines: list[int] = field(default_factory=list)


@dataclass
class KernelReport:
    """Labels of one kernel: a CUDA __global__ function or a Triton @jit function."""

    name: str
    language: str  # cuda | triton
    line: int
    source_index: int = -1  # which CudaSource (cuda kernels)
    labels: dict[str, list[Label]] = field(default_factory=dict)


@dataclass
class PassStatus:
    name: str  # python | clang | ptx
    status: str  # ok | partial | skipped | failed
    message: str = ""
    seconds: float = 0.0


@dataclass
class CandidateRecord:
    path: str  # as given (relative to the corpus root where there is one)
    sha256: str = ""
    size: int = 0
    # Where it came from (PKB run tree name, or '' for plain folders)
    run_tree: str = ""
    backend: str = ""
    precision: str = ""
    hardware: str = ""
    provider: str = ""
    model: str = ""
    problem_id: int | None = None  # the problem it answers (pkb.problem_match), not always the file name's id
    problem_name: str = ""
    # How the problem was found: rule, matched stem, the file name's id and name, solution()'s
    # parameters (pkb.problem_match.ProblemMatch.to_data()).
    problem_match: dict[str, Any] = field(default_factory=dict)
    # Reading and passes
    parse_status: str = "ok"
    parse_message: str = ""
    parse_line: int = 0
    passes: list[PassStatus] = field(default_factory=list)
    facts: StaticFacts = field(default_factory=StaticFacts)
    # Static results
    labels: dict[str, list[Label]] = field(default_factory=dict)  # candidate as a whole
    kernels: list[KernelReport] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    suppressed: list[Finding] = field(default_factory=list)  # findings a `noqa` comment silenced (pkb.suppress)
    # Later stages (evaluation, profile, diagnosis) add their own parts here, as plain data.
    evaluation: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    diagnosis: dict[str, Any] = field(default_factory=dict)
    # The decoded text and its syntax tree, kept in memory so no stage reads or parses the file
    # twice; never serialized.
    source: str = field(default="", repr=False, compare=False)
    tree: Any = field(default=None, repr=False, compare=False)

    def syntax_tree(self) -> Any:
        """The file's `ast.Module` (parsed once, on first use); None when it does not parse."""
        if self.tree is None and self.source:
            import ast

            try:
                self.tree = ast.parse(self.source)
            except (SyntaxError, ValueError, RecursionError, SystemError, MemoryError):
                self.tree = False
        return self.tree or None

    # ---- derived views -------------------------------------------------------------------

    def label_values(self, axis: str) -> list[str]:
        return [lab.value for lab in self.labels.get(axis, [])]

    def add_label(self, label: Label) -> None:
        """Add a candidate-level label, merging evidence into an existing one of the same value."""
        existing = self.labels.setdefault(label.axis, [])
        for lab in existing:
            if lab.value == label.value:
                lab.evidence.extend(e for e in label.evidence if e not in lab.evidence)
                return
        existing.append(label)

    def pass_status(self, name: str) -> PassStatus | None:
        return next((p for p in self.passes if p.name == name), None)

    # ---- serialization ----------------------------------------------------------------------

    def to_data(self) -> dict[str, Any]:
        """Everything but the source text, for the cache and the store."""
        return to_data(self)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> CandidateRecord:
        return from_data(cls, data)

    def to_json_line(self) -> dict[str, Any]:
        """The public JSON-lines shape: labels under the axis names, per kernel and overall."""

        def axes(labels: dict[str, list[Label]]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for axis in (*taxonomy.AXES, "ordering", "fallback"):
                out[axis] = [
                    {"label": lab.value, "evidence": [to_data(e) for e in lab.evidence]}
                    for lab in labels.get(axis, [])
                ]
            return out

        return {
            "schema_version": SCHEMA_VERSION,
            "path": self.path,
            "sha256": self.sha256,
            "problem_id": self.problem_id,
            "problem_name": self.problem_name,
            "problem_match": self.problem_match,
            "run_tree": self.run_tree,
            "backend": self.backend,
            "precision": self.precision,
            "hardware": self.hardware,
            "provider": self.provider,
            "model": self.model,
            "parse_status": self.parse_status,
            "parse_message": self.parse_message,
            "passes": [to_data(p) for p in self.passes],
            **axes(self.labels),
            "kernels": [
                {"name": k.name, "language": k.language, "line": k.line, **axes(k.labels)}
                for k in self.kernels
            ],
            "findings": [to_data(f) for f in self.findings],
            "suppressed": [to_data(f) for f in self.suppressed],
            "evaluation": self.evaluation,
            "profile": self.profile,
            "diagnosis": self.diagnosis,
        }

    def static_line(self) -> dict[str, Any]:
        """The JSON line without the later stages' parts: what the static stage stores."""
        line = self.to_json_line()
        for part in LATER_PARTS:
            line.pop(part)
        return line

    @classmethod
    def from_json_line(cls, data: dict[str, Any]) -> CandidateRecord:
        """The inverse of to_json_line (the facts and the source text are not in the line)."""

        def axes(d: dict[str, Any]) -> dict[str, list[Label]]:
            out: dict[str, list[Label]] = {}
            for axis in (*taxonomy.AXES, "ordering", "fallback"):
                labs = [Label(axis, item["label"], [Evidence(**e) for e in item.get("evidence", [])]) for item in d.get(axis) or []]
                if labs:
                    out[axis] = labs
            return out

        rec = cls(path=data["path"])
        for key in ("sha256", "problem_id", "problem_name", "problem_match", "run_tree", "backend", "precision", "hardware",
                    "provider", "model", "parse_status", "parse_message"):
            if data.get(key) is not None:
                setattr(rec, key, data[key])
        rec.passes = [PassStatus(**p) for p in data.get("passes", [])]
        rec.labels = axes(data)
        rec.kernels = [KernelReport(name=k["name"], language=k.get("language", ""), line=k.get("line", 0), labels=axes(k))
                       for k in data.get("kernels", [])]
        rec.findings = [Finding(**f) for f in data.get("findings", [])]
        rec.suppressed = [Finding(**f) for f in data.get("suppressed", [])]
        for part in LATER_PARTS:
            setattr(rec, part, data.get(part) or {})
        return rec


# The fields later stages add to the record, each stored as it is produced (pkb.store).
LATER_PARTS = ("evaluation", "profile", "diagnosis")


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
