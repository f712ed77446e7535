#!/usr/bin/env python3
"""Runs `halinfo --ops --json` and `halinfo --ops` and checks each device's
operator implementation lists (SPEC §12, §17.3).

usage: check_halinfo_ops.py HALINFO cpu|cuda-no-cudnn|cuda-fake-cudnn

For every device and op kind: the list names its implementations, none of
which accepts without a descriptor; for every case: the descriptor was
accepted by the loader's rules, the names are the kind's list in the same
order, the implementations before the one that accepts declined, each
decline carries a non-empty reason, and the ones after it were not asked
(or declined unasked, with a reason). Then what the named setup must show:
  cpu              convolution on oneDNN (or the plugin declining it, with
                   why, in a build without oneDNN); group norm declined by
                   the plugin (no oneDNN primitive) and served by portable.
  cuda-no-cudnn    every convolution, pooling and batch-norm case declined
                   by cuda.cudnn with the reason naming cuDNN and the
                   library it looked for (max pooling with HAL's indices
                   and inference batch norm with theirs, before any library
                   is looked for).
  cuda-fake-cudnn  every f32 convolution and training batch-norm case and
                   average pooling accepted by cuda.cudnn; max pooling (HAL's
                   indices) and inference batch norm declined by it with
                   the reason.
The environment (HAL_PLUGINS, the stand-in paths) comes from the CTest entry.
"""
import json
import re
import subprocess
import sys

ACCEPTS, DECLINES, NOT_ASKED = ("HAL_OP_VERDICT_ACCEPTS", "HAL_OP_VERDICT_DECLINES",
                                "HAL_OP_VERDICT_NOT_ASKED")
CONVOLUTIONS = ("convolution", "convolution_backward_data", "convolution_backward_weights")
# The kinds the cuda plugin serves on cuDNN.
CUDNN_KINDS = CONVOLUTIONS + ("pooling", "pooling_backward", "batch_norm", "batch_norm_backward")


def check_list(implementations, names, what):
    assert [i["name"] for i in implementations] == names, \
        f"{what}: {[i['name'] for i in implementations]} is not the kind's list {names}"
    verdicts = [i["verdict"] for i in implementations]
    assert verdicts.count(ACCEPTS) <= 1, f"{what}: more than one accepts: {verdicts}"
    accepted = verdicts.index(ACCEPTS) if ACCEPTS in verdicts else len(verdicts)
    for position, implementation in enumerate(implementations):
        verdict, reason = implementation["verdict"], implementation["reason"]
        if position < accepted:
            assert verdict == DECLINES, f"{what}: {implementation} before the accepted one"
        if position > accepted:
            assert verdict in (NOT_ASKED, DECLINES), f"{what}: {implementation} after it"
        if verdict == DECLINES:
            assert reason.strip(), f"{what}: {implementation['name']} declines without a reason"
        else:
            assert reason == "", f"{what}: {implementation} has a reason but does not decline"


def check_device(device):
    what = f"device {device['index']} ({device['plugin']})"
    kinds = {kind["kind"]: kind for kind in device["operators"]}
    assert len(kinds) >= 40, f"{what}: only {len(kinds)} op kinds listed"
    for name, kind in kinds.items():
        names = [i["name"] for i in kind["implementations"]]
        assert names and all(names), f"{what} {name}: no implementations named: {kind}"
        for implementation in kind["implementations"]:  # nothing asked without a descriptor
            assert implementation["verdict"] in (NOT_ASKED, DECLINES), f"{what} {name}: {kind}"
            assert (implementation["verdict"] == DECLINES) == bool(
                implementation["reason"].strip()), f"{what} {name}: {implementation}"
        for case in kind["cases"]:
            assert case["error"] is None, f"{what} {name} {case['case']}: {case['error']}"
            check_list(case["implementations"], names, f"{what} {name} {case['case']}")
    for name in CONVOLUTIONS + ("pooling", "batch_norm", "group_norm", "matmul"):
        assert kinds[name]["cases"], f"{what}: no cases of {name}"
    return kinds


def first(case, name):
    return next(i for i in case["implementations"] if i["name"] == name)


def main():
    halinfo, setup = sys.argv[1], sys.argv[2]
    run = subprocess.run([halinfo, "--ops", "--json"], capture_output=True, text=True,
                         timeout=120)
    sys.stderr.write(run.stderr)
    assert run.returncode == 0, run.returncode
    doc = json.loads(run.stdout)
    assert doc["error"] is None and doc["devices"], doc
    for device in doc["devices"]:
        kinds = check_device(device)
        if setup == "cpu":
            convolution = kinds["convolution"]
            own = convolution["implementations"][0]
            if own["name"] == "cpu.onednn":
                for case in convolution["cases"]:
                    assert first(case, "cpu.onednn")["verdict"] == ACCEPTS, case
            else:  # a build without oneDNN: declined, with why
                assert own["name"] == "cpu" and own["verdict"] == DECLINES, own
            for case in kinds["group_norm"]["cases"]:
                own = case["implementations"][0]
                assert own["name"] == "cpu" and own["verdict"] == DECLINES, case
                assert "no implementation of its own for group_norm" in own["reason"], own
                assert first(case, "portable")["verdict"] == ACCEPTS, case
        elif setup == "cuda-no-cudnn":
            for name in CUDNN_KINDS:
                assert [i["name"] for i in kinds[name]["implementations"]] == \
                    ["cuda.cudnn", "portable"], kinds[name]
                for case in kinds[name]["cases"]:
                    cudnn = first(case, "cuda.cudnn")
                    assert cudnn["verdict"] == DECLINES, case
                    # Declined for the op's contract before the library is looked for.
                    if " max " in case["case"]:
                        assert "indices" in cudnn["reason"], cudnn
                        continue
                    if case["case"].endswith("inference"):
                        assert "inference batch norm" in cudnn["reason"], cudnn
                        continue
                    assert "cuDNN" in cudnn["reason"] and \
                        "/nonexistent/libcudnn.so.9" in cudnn["reason"], cudnn
        elif setup == "cuda-fake-cudnn":
            for name in CONVOLUTIONS + ("batch_norm", "batch_norm_backward"):
                for case in kinds[name]["cases"]:
                    cudnn = first(case, "cuda.cudnn")
                    if case["case"].endswith("inference"):  # declined, saying why
                        assert cudnn["verdict"] == DECLINES and \
                            "inference batch norm" in cudnn["reason"], case
                    elif case["case"].startswith("f32"):
                        assert cudnn["verdict"] == ACCEPTS, case
            # Average pooling on cuDNN's resample; max pooling with HAL's
            # indices declined, saying why (cuDNN's index is another).
            for name, why in (("pooling", "HAL's max indices are flat positions"),
                              ("pooling_backward", "the max backward reads HAL's saved indices")):
                for case in kinds[name]["cases"]:
                    cudnn = first(case, "cuda.cudnn")
                    if " max " in case["case"]:
                        assert cudnn["verdict"] == DECLINES and why in cudnn["reason"], case
                    else:
                        assert cudnn["verdict"] == ACCEPTS, case
        else:
            raise SystemExit(f"unknown setup {setup!r}")

    # The text form says the same: the list per kind, then each case's verdicts.
    text = subprocess.run([halinfo, "--ops"], capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.returncode
    out = text.stdout
    assert "operators (each kind's implementations in the order tried):" in out, out
    if setup == "cpu":
        assert re.search(r"\n +group_norm +cpu > portable\n", out), out
        assert re.search(r"\n +cpu +declines: the plugin has no implementation of its own for "
                         r"group_norm\n +portable +accepts\n", out), out
    elif setup == "cuda-no-cudnn":
        assert re.search(r"\n +convolution +cuda\.cudnn > portable\n", out), out
        assert re.search(r"\n +cuda\.cudnn +declines: cuDNN: [^\n]*/nonexistent/libcudnn\.so\.9",
                         out), out
    elif setup == "cuda-fake-cudnn":
        assert re.search(r"f32 NHWC 3x3[^\n]*:\n +cuda\.cudnn +accepts\n", out), out
        assert re.search(r"max 3x3 stride 2 pad 1:\n +cuda\.cudnn +declines: cuDNN: HAL's max "
                         r"indices are flat positions", out), out
        assert re.search(r"f32 NCHW training:\n +cuda\.cudnn +accepts\n", out), out
        assert re.search(r"f32 NCHW inference:\n +cuda\.cudnn +declines: cuDNN: inference batch "
                         r"norm", out), out
    print(f"halinfo --ops ({setup}): {len(doc['devices'])} device(s) checked")


if __name__ == "__main__":
    main()
