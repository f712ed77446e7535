#!/usr/bin/env python3
"""Validates halconform certification records against the JSON Schema."""
import json
import sys

import jsonschema


def main():
    with open(sys.argv[1]) as file:
        schema = json.load(file)
    jsonschema.Draft202012Validator.check_schema(schema)
    for path in sys.argv[2:]:
        with open(path) as file:
            record = json.load(file)
        jsonschema.Draft202012Validator(schema).validate(record)
        print(f"{path}: valid ({len(record['tests'])} tests, verdict {record['verdict']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
