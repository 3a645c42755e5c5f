"""A --try-fixes trial record read back (core/trial_record.py): the records trials.json holds
come back as they were written, and a field missing or of the wrong type is an error naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trial_records import RECORD, record

from gpudoctor.core.trial_record import NotTried, TrialRecord, TrialRound, trial_records
from gpudoctor.errors import InputError, TrialRecordError

KNOBS = Path(__file__).parent / "data" / "knobs_h200"


BUNDLES = sorted(p.name for p in KNOBS.iterdir() if (p / "trials.json").is_file())


@pytest.mark.parametrize("bundle", BUNDLES)
def test_the_records_of_a_trials_json_read_back_and_write_the_same_json(bundle: str) -> None:
    data = json.loads((KNOBS / bundle / "trials.json").read_text())
    records = trial_records(data["trials"])
    written = json.dumps([r.to_dict() for r in records], indent=2)
    assert written == json.dumps(data["trials"], indent=2)
    not_tried = data["trials_not_tried"]
    assert [NotTried.from_dict(n).to_dict() for n in not_tried] == not_tried


def test_a_record_with_its_processes_reads_back() -> None:
    rounds = (
        TrialRound("/r/trials/compile", "ok", "", 9.5, 120, 14.02),
        TrialRound("/r/trials/compile.r2", "crashed", "exit code 1: boom", 3.0, 0, None),
    )
    rec = record(rounds=rounds, floor_pct=1.0)
    again = TrialRecord.from_dict(json.loads(json.dumps(rec.to_dict())))
    assert again == rec and list(again.to_dict())[-2:] == ["floor_pct", "rounds"]


def test_the_fields_later_versions_added_may_be_absent() -> None:
    later = ("reference", "predicted_by", "files_written")
    old = {k: v for k, v in RECORD.to_dict().items() if k not in later}
    rec = TrialRecord.from_dict(old)
    assert rec.reference is None and rec.predicted_by is None and rec.files_written is None
    assert rec.measured_speedup == RECORD.measured_speedup


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"measured_speedup": "fast"},
            "trials[3]: 'measured_speedup' is 'fast', not a number or null",
        ),
        ({"knob": None}, "trials[3]: 'knob' is None, not a string"),
        ({"n_trial": 2.5}, "trials[3]: 'n_trial' is 2.5, not a whole number"),
        ({"n_trial": True}, "trials[3]: 'n_trial' is True, not a whole number"),
        (
            {"speedup_ci95": [1.2]},
            "trials[3]: 'speedup_ci95' is [1.2], not a list of two numbers or null",
        ),
        ({"effects": ["a", 3]}, "trials[3]: 'effects' is ['a', 3], not a list of strings"),
        (
            {"numerics": {**RECORD.numerics.to_dict(), "checked": "yes"}},
            "trials[3].numerics: 'checked' is 'yes', not true or false",
        ),
        ({"peak_memory_bytes": [1, 2]}, "trials[3]: 'peak_memory_bytes' is [1, 2], not an object"),
        ({"rounds": [{"dir": "d"}]}, "trials[3].rounds[0]: no 'status' (a string)"),
        ({"rounds": ["r"]}, "trials[3].rounds[0] is 'r', not an object"),
    ],
)
def test_a_field_of_the_wrong_type_is_named(change: dict, message: str) -> None:
    with pytest.raises(TrialRecordError) as err:
        TrialRecord.from_dict(RECORD.to_dict() | change, "trials[3]")
    text = str(err.value)
    assert text.startswith(message) and "\n" not in text
    assert text.endswith("run gpudoctor run --try-fixes again to write it anew")
    assert isinstance(err.value, InputError)  # the command line's one-line error, exit code 2


@pytest.mark.parametrize("key", ["knob", "status", "numerics", "wall_s"])
def test_a_missing_field_is_named(key: str) -> None:
    d = {k: v for k, v in RECORD.to_dict().items() if k != key}
    with pytest.raises(TrialRecordError, match=rf"^trials\[0\]: no '{key}' \("):
        trial_records([d])


def test_records_that_are_not_a_list_or_not_objects_are_named() -> None:
    with pytest.raises(TrialRecordError, match=r"^report.json trials is \{\}, not a list of trial"):
        trial_records({}, "report.json trials")
    with pytest.raises(TrialRecordError, match=r"^trials\[1\] is 'compile', not an object"):
        trial_records([RECORD.to_dict(), "compile"])
    long = "x" * 200
    with pytest.raises(TrialRecordError) as err:
        trial_records([RECORD.to_dict() | {"status": [long]}])
    assert "..." in str(err.value) and long not in str(err.value)  # the value shown is cut short
