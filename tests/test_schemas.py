"""Every JSON schema the package ships (src/cpugpu_conformance/schemas/) is a valid schema, and
the matrix's names exactly what the rest of the project knows: the device registry's devices
and the suite's hypothesis profiles. (That the wheel carries them: test_wheel.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from cpugpu_conformance import devices
from cpugpu_conformance.results import schema
from cpugpu_conformance.runner import matrix as matrices
from cpugpu_conformance.testing.shared.budget import PROFILES

pytestmark = pytest.mark.quick  # the core: nox -s quick

SCHEMAS = Path(matrices.__file__).resolve().parents[1] / "schemas"
SCHEMA_FILES = sorted(SCHEMAS.glob("*.schema.json"))


def test_the_package_ships_the_three_schemas():
    assert [p.name for p in SCHEMA_FILES] == ["cell-result.schema.json", "compat.schema.json", "matrix.schema.json"]
    assert sorted(p.name for p in SCHEMAS.iterdir() if p.is_file()) == [p.name for p in SCHEMA_FILES]


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda p: p.name)
def test_every_schema_is_a_valid_json_schema_of_the_draft_it_names(path):
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.validators.validator_for(document).check_schema(document)  # raises SchemaError naming the fault
    assert schema(path.name.removesuffix(".schema.json")) == document  # what the package loads is the file


def test_the_matrix_schema_names_exactly_the_registrys_devices():
    assert tuple(matrices.SCHEMA["properties"]["devices"]["properties"]) == devices.NAMES


def test_the_matrix_schema_names_exactly_the_suites_hypothesis_profiles():
    assert matrices.SCHEMA["properties"]["hypothesis_profile"]["enum"] == list(PROFILES)


def test_a_broken_schema_is_caught_by_the_check():
    """The check above is not vacuous: a schema with a wrong-typed keyword fails it."""
    broken = dict(matrices.SCHEMA, required="python")
    with pytest.raises(jsonschema.SchemaError):
        jsonschema.Draft202012Validator.check_schema(broken)
