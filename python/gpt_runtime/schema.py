"""A small JSON Schema (draft 2020-12) validator for the keywords manifest.schema.json uses, so that
the schema file is the one definition of the manifest's fields and the runtime needs no jsonschema
package. A keyword it does not implement is an error in the schema, not silently ignored."""

import re
from typing import Any

# Keywords that only annotate.
_ANNOTATIONS = {"$schema", "$id", "$comment", "title", "description", "$defs"}
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    # Stricter than the draft, which also calls 1.0 an integer: sizes and indices must be ints.
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class SchemaViolation(Exception):
    """`path` (like programs[0].launches[2].grid) breaks the schema; the message says how."""

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"{path or '(top level)'}: {problem}")


def _same_json(a: Any, b: Any) -> bool:
    # In JSON true is not 1, though Python says True == 1.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Validator:
    def __init__(self, schema: dict):
        self._root = schema

    def validate(self, value: Any) -> None:
        """Raises SchemaViolation at the first place `value` breaks the schema."""
        self._check(self._root, value, "")

    def _resolve(self, ref: str) -> dict:
        if not ref.startswith("#/"):
            raise ValueError(f"schema: only local $refs are implemented, got {ref!r}")
        node = self._root
        for part in ref[2:].split("/"):
            node = node[part]
        return node

    def _check(self, schema: dict, value: Any, path: str) -> None:
        for keyword in schema:
            if keyword not in _KEYWORDS and keyword not in _ANNOTATIONS:
                raise ValueError(f"schema: keyword {keyword!r} is not implemented by gpt_runtime.schema")
        if "$ref" in schema:
            self._check(self._resolve(schema["$ref"]), value, path)
        if "type" in schema and not _TYPES[schema["type"]](value):
            raise SchemaViolation(path, f"expected {schema['type']}, got {_describe(value)}")
        if "const" in schema and not _same_json(value, schema["const"]):
            raise SchemaViolation(path, f"must be {schema['const']!r}, got {_describe(value)}")
        if "enum" in schema and not any(_same_json(value, option) for option in schema["enum"]):
            raise SchemaViolation(path, f"must be one of {schema['enum']}, got {_describe(value)}")
        self._check_number(schema, value, path)
        self._check_string(schema, value, path)
        if isinstance(value, list):
            self._check_array(schema, value, path)
        if isinstance(value, dict):
            self._check_object(schema, value, path)
        if "anyOf" in schema:
            self._check_any_of(schema["anyOf"], value, path)
        if "if" in schema and self._holds(schema["if"], value, path) and "then" in schema:
            self._check(schema["then"], value, path)

    def _holds(self, schema: dict, value: Any, path: str) -> bool:
        try:
            self._check(schema, value, path)
        except SchemaViolation:
            return False
        return True

    def _check_number(self, schema: dict, value: Any, path: str) -> None:
        if not _TYPES["number"](value):
            return
        if "minimum" in schema and value < schema["minimum"]:
            raise SchemaViolation(path, f"must be >= {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            raise SchemaViolation(path, f"must be <= {schema['maximum']}, got {value}")

    def _check_string(self, schema: dict, value: Any, path: str) -> None:
        if not isinstance(value, str):
            return
        if "minLength" in schema and len(value) < schema["minLength"]:
            raise SchemaViolation(path, f"must have at least {schema['minLength']} characters")
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            raise SchemaViolation(path, f"{_describe(value)} does not match {schema['pattern']}")

    def _check_array(self, schema: dict, value: list, path: str) -> None:
        if "minItems" in schema and len(value) < schema["minItems"]:
            raise SchemaViolation(path, f"expected at least {schema['minItems']} items, got {len(value)}")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise SchemaViolation(path, f"expected at most {schema['maxItems']} items, got {len(value)}")
        if "items" in schema:
            for i, item in enumerate(value):
                self._check(schema["items"], item, f"{path}[{i}]")

    def _check_object(self, schema: dict, value: dict, path: str) -> None:
        prefix = f"{path}." if path else ""
        for name in schema.get("required", []):
            if name not in value:
                raise SchemaViolation(path, f"missing required field {name!r}")
        properties = schema.get("properties", {})
        if isinstance(schema.get("additionalProperties"), dict):
            raise ValueError("schema: additionalProperties as a schema is not implemented by gpt_runtime.schema")
        for name, item in value.items():
            if name in properties:
                self._check(properties[name], item, prefix + name)
            elif schema.get("additionalProperties", True) is False:
                raise SchemaViolation(path, f"unknown field {name!r}")

    def _check_any_of(self, options: list, value: Any, path: str) -> None:
        problems = []
        for option in options:
            try:
                self._check(option, value, path)
                return
            except SchemaViolation as violation:
                problems.append(str(violation))
        raise SchemaViolation(path, "matches none of the allowed forms: " + " | ".join(problems))


_KEYWORDS = {
    "$ref",
    "type",
    "const",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "pattern",
    "minItems",
    "maxItems",
    "items",
    "required",
    "properties",
    "additionalProperties",
    "anyOf",
    "if",
    "then",
}
