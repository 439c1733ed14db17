"""Data contracts: fixed table dtypes whatever the data, paths relative to the corpus root in
every output, a schema_version in every record, and the published JSON Schema of the record."""

import json
from dataclasses import fields
from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

from pkb.record import SCHEMA_VERSION, CandidateRecord
from pkb.schema import RecordModel, SCHEMA_PATH, schema_text, validate_line
from reports.tables import DTYPES, read_csv_typed
from cli_runner import run_cli

ROOT = Path(__file__).resolve().parents[1]
PURE = "import torch\n\ndef solution(tensor):\n    return tensor.clone()\n"


def test_table_dtypes_are_fixed_whatever_the_data(tmp_path, capsys):
    d = tmp_path / "c"
    d.mkdir()
    (d / "loose_name.py").write_text(PURE)  # no problem id in the name: problem_id is null everywhere
    code, cap = run_cli([str(d), "--no-ptx", "-o", str(tmp_path / "o"), "-q"], tmp_path, capsys)
    assert code == 0, cap.err
    for name, dtypes in DTYPES.items():
        frame = pd.read_parquet(tmp_path / "o" / f"{name}.parquet")
        assert list(frame.columns) == list(dtypes)
        for column, dtype in dtypes.items():
            got = str(frame[column].dtype)
            assert got == dtype or (dtype == "str" and got in ("str", "object", "string")), (name, column, got)
        typed = read_csv_typed(tmp_path / "o" / f"{name}.csv")
        assert [str(t) for c, t in typed.dtypes.items() if dtypes[c] != "str"] == [d for d in dtypes.values() if d != "str"]
    cand = pd.read_parquet(tmp_path / "o" / "candidates.parquet")
    assert cand["problem_id"].isna().all() and str(cand["problem_id"].dtype) == "Int64"
    assert cand["speedup"].isna().all() and str(cand["speedup"].dtype) == "float64"
    assert json.loads((tmp_path / "o" / "tables.dtypes.json").read_text()) == DTYPES


def test_integer_columns_stay_integers_with_values(tmp_path, capsys):
    code, cap = run_cli([str(ROOT / "corpus" / "solutions_cuda_bf16_h100_8_pkb_sample-b"), "--no-ptx", "-o", str(tmp_path / "o"), "-q"],
                        tmp_path, capsys)
    cand = pd.read_parquet(tmp_path / "o" / "candidates.parquet")
    assert str(cand["problem_id"].dtype) == "Int64" and cand["problem_id"].notna().all()
    csv_text = (tmp_path / "o" / "candidates.csv").read_text()
    assert ".0," not in csv_text.split("\n", 2)[1]  # 3, not 3.0
    assert str(read_csv_typed(tmp_path / "o" / "kernels.csv")["line"].dtype) == "Int64"


def test_every_record_line_has_a_schema_version_and_validates(tmp_path, capsys):
    code, cap = run_cli([str(ROOT / "corpus"), "--no-ptx", "-o", str(tmp_path / "o"), "-q"], tmp_path, capsys)
    lines = [json.loads(l) for l in (tmp_path / "o" / "static.jsonl").read_text().splitlines()]
    assert len(lines) > 50
    for line in lines:
        assert line["schema_version"] == SCHEMA_VERSION
        validate_line(line)


def test_validation_refuses_words_outside_the_vocabulary():
    line = CandidateRecord(path="x.py").to_json_line()
    validate_line(line)
    with pytest.raises(ValidationError, match="not a mechanism label"):
        validate_line({**line, "mechanism": [{"label": "telepathy", "evidence": []}]})
    with pytest.raises(ValidationError):
        validate_line({**line, "schema_version": SCHEMA_VERSION + 1})
    with pytest.raises(ValidationError):
        validate_line({**line, "problem_id": "twelve"})


def test_the_model_mirrors_the_record():
    line = CandidateRecord(path="x.py").to_json_line()
    missing = sorted(set(line) - set(RecordModel.model_fields))
    assert not missing, f"add {missing} to pkb/schema.py RecordModel and run `python -m pkb.schema`"
    public = {f.name for f in fields(CandidateRecord)} - {"facts", "labels", "source", "tree", "size", "parse_line"}
    assert public <= set(RecordModel.model_fields), public - set(RecordModel.model_fields)


def test_published_schema_is_current():
    assert SCHEMA_PATH.read_text() == schema_text(), "run `python -m pkb.schema` to refresh docs/record.schema.json"
    schema = json.loads(SCHEMA_PATH.read_text())
    assert "schema_version" in schema["required"] and "path" in schema["required"]


def test_eval_jsonl_paths_do_not_depend_on_the_argument(tmp_path, capsys):
    tree = tmp_path / "pkb" / "solutions_cuda_bf16_h100_8_pkb_m"
    tree.mkdir(parents=True)
    (tree / "mine.py").write_text(PURE)  # matches no problem: not run, no launch needed
    seen = set()
    for i, arg in enumerate((tree, tree / "mine.py", tmp_path / "pkb")):
        out = tmp_path / f"o{i}"
        code, cap = run_cli(["eval", str(arg), "--out", str(out), "--world-size", "2"], tmp_path, capsys)
        assert code == 1
        line = json.loads((out / "eval.jsonl").read_text().splitlines()[0])
        assert line["schema_version"] == SCHEMA_VERSION
        validate_line(line)
        seen.add(line["path"])
        seen.add(pd.read_parquet(out / "candidates.parquet")["path"][0])
    assert seen == {"solutions_cuda_bf16_h100_8_pkb_m/mine.py"}
