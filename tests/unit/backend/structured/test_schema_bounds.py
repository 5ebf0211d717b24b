"""Default bounds for numbers and strings a schema leaves unbounded (schema_bounds)."""

from __future__ import annotations

from mlxd.backend.structured.schema_bounds import ValueCaps, with_default_bounds

CAPS = ValueCaps(integer_digits=3, fraction_digits=2, string_chars=50)


def test_unbounded_numbers_and_strings_get_the_caps_everywhere_in_the_schema():
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "x": {"type": "number"},
            "s": {"type": "string"},
            "list": {"type": "array", "items": {"type": ["number", "null"]}},
        },
        "$defs": {"d": {"anyOf": [{"type": "integer"}, {"type": "string"}]}},
    }
    out = with_default_bounds(schema, CAPS)
    props = out["properties"]
    assert props["n"] == {"type": "integer", "minimum": -999, "maximum": 999}
    assert props["x"] == {
        "type": "number",
        "exclusiveMinimum": -1000.0,
        "exclusiveMaximum": 1000.0,
        "multipleOf": 0.01,
    }
    assert props["s"] == {"type": "string", "maxLength": 50}
    assert props["list"]["items"]["exclusiveMaximum"] == 1000.0
    assert out["$defs"]["d"]["anyOf"][0]["maximum"] == 999
    assert out["$defs"]["d"]["anyOf"][1]["maxLength"] == 50
    assert schema["properties"]["n"] == {"type": "integer"}  # the caller's schema unchanged


def test_a_schema_s_own_bounds_are_kept_and_only_a_missing_side_is_added():
    out = with_default_bounds({"type": "integer", "minimum": 0}, CAPS)
    assert out == {"type": "integer", "minimum": 0, "maximum": 999}
    # A minimum above the cap: no maximum that would leave nothing to write.
    assert with_default_bounds({"type": "integer", "minimum": 5000}, CAPS) == {
        "type": "integer",
        "minimum": 5000,
    }
    bounded = {"type": "number", "minimum": 1, "maximum": 2, "multipleOf": 0.5}
    assert with_default_bounds(bounded, CAPS) == bounded


def test_shaped_strings_enums_and_untyped_values_are_left_alone():
    for schema in (
        {"type": "string", "pattern": "^a+$"},
        {"type": "string", "format": "date"},
        {"type": "string", "maxLength": 5000},
        {"type": "integer", "enum": [1, 2]},
        {"const": 7},
        {},
    ):
        assert with_default_bounds(schema, CAPS) == schema


def test_a_zero_cap_is_off():
    off = ValueCaps(integer_digits=0, fraction_digits=0, string_chars=0)
    for schema in ({"type": "integer"}, {"type": "number"}, {"type": "string"}):
        assert with_default_bounds(schema, off) == schema
