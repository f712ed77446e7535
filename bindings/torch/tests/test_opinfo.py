"""PyTorch's OpInfo database on the hal device (opinfo_check.py says how an op is checked).

Default tier: every OpInfo in opinfo_expected.txt (those that ran natively on HAL and agreed
with the CPU, forward and backward, in float32 when the list was made) must still pass natively
on its first four sample inputs: CI fails on a regression; so must the bfloat16 OpInfos that
once failed, on every sample. The slow tier (HAL_TORCH_LONG=1) runs every OpInfo in float32
and bfloat16, prints the coverage table and holds each dtype to its list (opinfo_expected.txt,
opinfo_expected_bf16.txt); opinfo_check.py --all --write refreshes a list.
"""
import os

import pytest
import torch

import opinfo_check

HERE = os.path.dirname(os.path.abspath(__file__))
LONG = os.environ.get("HAL_TORCH_LONG") == "1"


def plugin() -> str:
    """The plugin of hal:0, where the samples run (cpu, or opencl: conftest.py)."""
    return torch.hal.get_device_properties(0)["plugin"]


def run(dtype, names=None, max_samples=None):
    results = []
    for op in opinfo_check.op_db():
        if names is None or opinfo_check.full_name(op) in names:
            results.append(opinfo_check.check(op, dtype, max_samples))
    return results


def test_expected_ops_pass_natively(capsys):
    expected = opinfo_check.expected_list(os.path.join(HERE, "opinfo_expected.txt"))
    assert len(expected) > 50
    results = run(torch.float32, set(expected), max_samples=4)
    found = {r.name for r in results}
    assert found == set(expected), f"not in this torch's op_db: {sorted(set(expected) - found)}"
    # A first-four-samples run may find nothing the CPU takes (skip); it must never fail or
    # fall back.
    regressions = [r for r in results if r.status == "fail" or r.kind != "native"]
    with capsys.disabled():
        print(f"\nopinfo on {plugin()}: {len(results)} ops checked (float32, forward and "
              f"backward), {len(results) - len(regressions)} pass natively")
    assert not regressions, "\n".join(f"{r.name}: {r.status} [{r.kind}] {r.message}"
                                      for r in regressions)


# bfloat16 OpInfos that once failed: layer_norm returned f32 statistics for bf16 parameters;
# SDPA's backward, div(rounding_mode="trunc") and fmod's gradient differed from the CPU's by
# bf16 rounding (judged against float64 now: HAL is as accurate as the CPU, or more).
BFLOAT16_ONCE_FAILED = ["nn.functional.layer_norm", "nn.functional.scaled_dot_product_attention",
                        "div.trunc_rounding", "fmod"]


def test_bfloat16_ops_that_once_failed_pass(capsys):
    """Every sample; layer_norm and SDPA pass partly natively (a negative eps, and masks HAL
    lacks, take aten's path), div and fmod wholly."""
    results = run(torch.bfloat16, set(BFLOAT16_ONCE_FAILED), max_samples=None)
    assert {r.name for r in results} == set(BFLOAT16_ONCE_FAILED)
    failed = [r for r in results if r.status != "pass" or r.kind == "fallback" or
              (r.name in ("div.trunc_rounding", "fmod") and r.kind != "native")]
    with capsys.disabled():
        print(f"\nopinfo bfloat16 on {plugin()}: {len(results) - len(failed)} of {len(results)} "
              f"once-failing ops pass, every sample")
    assert not failed, "\n".join(f"{r.name}: {r.status} [{r.kind}] {r.message}" for r in failed)


@pytest.mark.skipif(not LONG, reason="the slow tier (HAL_TORCH_LONG=1)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_opinfo(dtype, capsys):
    results = run(dtype)
    with capsys.disabled():
        print()
        opinfo_check.report(results, 0)
        native = sum(1 for r in results if r.status == "pass" and r.kind == "native")
        print(f"opinfo coverage ({dtype}) on {plugin()}: {native} native / {len(results)} "
              f"OpInfos")
    listed = {torch.float32: "opinfo_expected.txt", torch.bfloat16: "opinfo_expected_bf16.txt"}
    expected = set(opinfo_check.expected_list(os.path.join(HERE, listed[dtype])))
    lost = [r for r in results if r.name in expected and (r.status != "pass"
                                                           or r.kind != "native")]
    assert not lost, [(r.name, r.message) for r in lost]
    # In float32 no OpInfo fails at all: what HAL does not serve (on opencl, what the portable
    # implementations decline) falls back to the CPU's kernel with its result. (bfloat16 has
    # failures of partly native ops, the same on the cpu and opencl plugins: README.md.)
    if dtype == torch.float32:
        failed = [r for r in results if r.status == "fail"]
        assert not failed, [(r.name, r.kind, r.message) for r in failed]
