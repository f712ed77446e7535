#!/usr/bin/env python3
"""Runs `halinfo --json` and checks its one JSON object against SPEC §12.

usage: check_halinfo_json.py HALINFO success|failure
The environment (HAL_PLUGINS, HAL_PLUGIN_PATH) comes from the CTest entry.
"""
import json
import subprocess
import sys

PLUGIN_FIELDS = {"path": str, "name": str, "version": str, "vendor": str, "build_id": str,
                 "found_by": str, "requested": bool, "outcome": str, "result": str,
                 "reason": str, "abi_version": str, "device_count": int}
DEVICE_FIELDS = {"index": int, "plugin": str, "plugin_device_index": int, "name": str,
                 "type": str, "capabilities": list, "module_formats": list}
ERROR_FIELDS = {"result": str, "function": str, "plugin": str, "message": str,
                "native_code": int}


def check_fields(obj, fields, what):
    for key, kind in fields.items():
        assert key in obj, f"{what} lacks {key!r}: {obj}"
        assert isinstance(obj[key], kind), f"{what}.{key} is not a {kind.__name__}: {obj}"


def main():
    halinfo, expect = sys.argv[1], sys.argv[2]
    run = subprocess.run([halinfo, "--json"], capture_output=True, text=True, timeout=60)
    sys.stderr.write(run.stderr)
    print(run.stdout)
    doc = json.loads(run.stdout)  # exactly one JSON value, or this raises
    assert isinstance(doc, dict)
    for key in ("hal_version", "abi_version"):
        assert isinstance(doc[key], str) and doc[key].count(".") == 2, doc[key]
    assert isinstance(doc["plugins"], list) and isinstance(doc["devices"], list)
    if expect == "success":
        assert run.returncode == 0, run.returncode
        assert doc["error"] is None, doc["error"]
        assert doc["plugins"] and doc["devices"], "expected plugins and devices"
        for plugin in doc["plugins"]:
            check_fields(plugin, PLUGIN_FIELDS, "plugin")
            assert plugin["outcome"].startswith("HAL_PLUGIN_"), plugin["outcome"]
            assert plugin["result"].startswith("HAL_"), plugin["result"]
        outcomes = {p["name"]: p["outcome"] for p in doc["plugins"]}
        assert outcomes.get("mock") == "HAL_PLUGIN_LOADED", outcomes
        assert outcomes.get("notelf") == "HAL_PLUGIN_FAILED_OPEN", outcomes
        for device in doc["devices"]:
            check_fields(device, DEVICE_FIELDS, "device")
            for name in device["capabilities"]:
                assert name.startswith("HAL_DEVICE_CAP_"), name
            for name in device["module_formats"]:
                assert name.startswith("HAL_MODULE_FORMAT_"), name
    else:
        assert run.returncode == 1, run.returncode
        assert doc["plugins"] == [] and doc["devices"] == [], doc
        error = doc["error"]
        check_fields(error, ERROR_FIELDS, "error")
        assert error["result"] == "HAL_ERROR_PLUGIN_LOAD", error
        assert error["function"] == "hal_init", error
        assert error["plugin"] == "loader", error
        assert error["message"].startswith("hal_init: plugin "), error
    print(f"halinfo --json: {expect} object as SPEC §12 shows it")


if __name__ == "__main__":
    main()
