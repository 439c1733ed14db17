"""The public record (one line of static.jsonl / eval.jsonl, CandidateRecord.to_json_line) as
pydantic models: validation of what we write, and the JSON Schema we publish.

    python -m pkb.schema [PATH]     write the JSON Schema (default docs/record.schema.json)

The models mirror pkb/record.py; tests/test_data_contracts.py fails when a field is added there
and not here, or when docs/record.schema.json is not the schema these models give. Labels are
checked against the vocabulary (pkb.taxonomy), so a word outside TAXONOMY.md fails validation.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pkb import taxonomy
from pkb.record import PARSE_STATUSES, SCHEMA_VERSION

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "docs" / "record.schema.json"

_Strict = ConfigDict(extra="forbid")


class EvidenceModel(BaseModel):
    model_config = _Strict
    file: str = Field(description="path relative to the corpus root")
    line: int = Field(description="1-based line in the file")
    snippet: str
    pass_name: Literal[taxonomy.PASSES] = Field(description="the pass that saw it")  # type: ignore[valid-type]
    note: str = ""


class LabelModel(BaseModel):
    model_config = _Strict
    label: str = Field(description="a word of TAXONOMY.md for this axis, or 'unknown'")
    evidence: list[EvidenceModel] = []


class FindingModel(BaseModel):
    model_config = _Strict
    rule: str = Field(pattern=r"^PKB\d{3}$")
    name: str
    severity: Literal["error", "warning", "info"]
    message: str
    file: str
    line: int
    snippet: str = ""
    kernel: str = ""
    pass_name: str = "python"
    related_lines: list[int] = Field(default_factory=list, description="other lines of the same defect (the other end of a race)")


class PassModel(BaseModel):
    model_config = _Strict
    name: str
    status: Literal["ok", "partial", "skipped", "failed"]
    message: str = ""
    seconds: float = 0.0


def _check_axis(axis: str, labels: list[LabelModel]) -> list[LabelModel]:
    for lab in labels:
        if lab.label != taxonomy.UNKNOWN and lab.label not in taxonomy.VOCABULARY.get(axis, (lab.label,)):
            raise ValueError(f"{lab.label!r} is not a {axis} label of TAXONOMY.md")
    return labels


class _Axes(BaseModel):
    model_config = _Strict
    mechanism: list[LabelModel] = Field(default=[], description="how bytes cross between GPUs")
    sync: list[LabelModel] = Field(default=[], description="how ranks agree that data is ready")
    overlap: list[LabelModel] = Field(default=[], description="how communication meets computation")
    ordering: list[LabelModel] = Field(default=[], description="memory-ordering detail of device flags")
    fallback: list[LabelModel] = Field(default=[], description="fallback paths (where a pass reports them)")

    @field_validator("mechanism", "sync", "overlap", "ordering")
    @classmethod
    def _vocabulary(cls, v: list[LabelModel], info: Any) -> list[LabelModel]:
        return _check_axis(info.field_name, v)


class KernelModel(_Axes):
    name: str
    language: str = Field(description="cuda | triton | ...")
    line: int


class EvaluationModel(BaseModel):
    """The evaluation's figures; open to the fields a stage adds (details, ranks, trials...)."""

    model_config = ConfigDict(extra="allow")
    status: Optional[str] = Field(default=None, description="ran | skipped_cached | not_run")
    outcome: Optional[str] = Field(default=None, description="an outcome of TAXONOMY.md, '' when none")
    subtype: Optional[str] = None
    speedup: Optional[float] = None
    correct: Optional[bool] = None
    reason: Optional[str] = None
    emulated: Optional[bool] = None

    @field_validator("outcome")
    @classmethod
    def _outcome(cls, v: Optional[str]) -> Optional[str]:
        if v and v not in taxonomy.OUTCOMES:
            raise ValueError(f"{v!r} is not an outcome of TAXONOMY.md")
        return v


class ProfileModel(BaseModel):
    """What `eval --profile` / `--ncu` stored (profiling.hooks.summarize_job, pkb.eval.ncu); open to
    the fields those stages add (the frames' paths...)."""

    model_config = ConfigDict(extra="allow")
    ranks: list[Optional[dict[str, Any]]] = Field(default=[], description="per rank: the profile summary of its trace (calls, medians, kernels)")
    errors: list[Any] = Field(default=[], description="what could not be read or drawn, per rank")
    merged_trace: Optional[str] = Field(default=None, description="every rank's trace in one chrome trace (Perfetto)")
    timeline_png: Optional[str] = None
    ncu: Optional[dict[str, Any]] = Field(default=None, description="Nsight Compute counters per profiled kernel and rank")


class DiagnosisModel(BaseModel):
    """Why the outcome (pkb.diagnose.explain.diagnose), made when the evaluation lands and stored with it."""

    model_config = ConfigDict(extra="allow")
    outcome: str = ""
    subtype: str = ""
    wrong: Optional[dict[str, Any]] = Field(default=None, description="the wrong-result hypotheses tested per trial and rank")
    slow: list[dict[str, Any]] = Field(default=[], description="slowness causes, ranked by measured cost, each with evidence")
    explanation: dict[str, Any] = Field(default={}, description="headline, cited evidence, likely fixes")


class RecordModel(_Axes):
    """One candidate: where it came from, how reading and each pass went, its labels (overall and
    per kernel) with evidence, its findings, and what later stages added."""

    schema_version: Literal[SCHEMA_VERSION] = Field(description="raised when a field changes meaning or goes")  # type: ignore[valid-type]
    path: str = Field(description="relative to the corpus root, the same whatever argument named it")
    sha256: str = ""
    problem_id: Optional[int] = None
    problem_name: str = ""
    problem_match: dict[str, Any] = {}
    run_tree: str = ""
    backend: str = ""
    precision: str = ""
    hardware: str = ""
    provider: str = ""
    model: str = ""
    parse_status: Literal[PARSE_STATUSES]  # type: ignore[valid-type]
    parse_message: str = ""
    passes: list[PassModel] = []
    kernels: list[KernelModel] = []
    findings: list[FindingModel] = []
    suppressed: list[FindingModel] = Field(default=[], description="findings a noqa comment on their line silenced")
    evaluation: EvaluationModel = EvaluationModel()
    profile: ProfileModel = ProfileModel()
    diagnosis: DiagnosisModel = DiagnosisModel()


def validate_line(data: dict[str, Any]) -> RecordModel:
    """The record line as a model; raises pydantic.ValidationError saying which field is wrong."""
    return RecordModel.model_validate(data)


def json_schema() -> dict[str, Any]:
    schema = RecordModel.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"pkb-analyze/record.schema.json#v{SCHEMA_VERSION}"
    return schema


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else SCHEMA_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(schema_text(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
