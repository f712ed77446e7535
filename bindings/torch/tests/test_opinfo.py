"""PyTorch's OpInfo database on the hal device (opinfo_check.py says how an op is checked).

Default tier: every OpInfo in opinfo_expected.txt (those that ran natively on HAL and agreed
with the CPU, forward and backward, in float32 when the list was made) must still pass natively
on its first four sample inputs: CI fails on a regression. The slow tier (HAL_TORCH_LONG=1) runs every OpInfo in float32 and
bfloat16 and prints the coverage table; opinfo_check.py --all --write refreshes the list.
"""
import os

import pytest
import torch

import opinfo_check

HERE = os.path.dirname(os.path.abspath(__file__))
LONG = os.environ.get("HAL_TORCH_LONG") == "1"


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
        print(f"\nopinfo: {len(results)} ops checked (float32, forward and backward), "
              f"{len(results) - len(regressions)} pass natively")
    assert not regressions, "\n".join(f"{r.name}: {r.status} [{r.kind}] {r.message}"
                                      for r in regressions)


@pytest.mark.skipif(not LONG, reason="the slow tier (HAL_TORCH_LONG=1)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_opinfo(dtype, capsys):
    results = run(dtype)
    with capsys.disabled():
        print()
        opinfo_check.report(results, 0)
        native = sum(1 for r in results if r.status == "pass" and r.kind == "native")
        print(f"opinfo coverage ({dtype}): {native} native / {len(results)} OpInfos")
    if dtype == torch.float32:
        expected = set(opinfo_check.expected_list(os.path.join(HERE, "opinfo_expected.txt")))
        lost = [r for r in results if r.name in expected and (r.status != "pass"
                                                               or r.kind != "native")]
        assert not lost, [(r.name, r.message) for r in lost]
