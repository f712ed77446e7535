"""PyTorch's OpInfo database run on the hal device against the CPU.

For an OpInfo, each sample input (torch's own ``op.sample_inputs``) runs on ``cpu`` and, moved
there, on ``hal``; the outputs must agree within the tolerance PyTorch's own device-vs-CPU test
uses (``test_compare_cpu``: atol = rtol = 1e-3; 16-bit floats at their own resolution, or, when
they miss it, as close to a float64 run of the sample as the CPU is: ACCURACY_MULTIPLE), and,
where the OpInfo supports autograd, so must the gradients of every floating input for the same
random output gradient. hal_torch.metrics() over the run says whether the op ran natively on
HAL (no fallback), partly, or through the fallback only.

    python3 bindings/torch/tests/opinfo_check.py --all [--dtype bfloat16] [--write list.txt]

prints the table the slow test prints, and writes the names that pass natively.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass

import torch

import hal_torch

# Ops whose results are random or uninitialised: equal results on two devices would be luck.
NOT_COMPARABLE = {
    "bernoulli": "random", "normal": "random", "normal.number_mean": "random",
    "uniform": "random", "multinomial": "random", "randint": "random", "randint_like": "random",
    "rand_like": "random", "randn_like": "random", "randn": "random", "rand": "random",
    "cauchy": "random", "exponential": "random", "geometric": "random", "log_normal": "random",
    "nn.functional.dropout": "random", "nn.functional.dropout2d": "random",
    "nn.functional.dropout3d": "random", "nn.functional.alpha_dropout": "random",
    "nn.functional.feature_alpha_dropout.with_train": "random",
    "nn.functional.feature_alpha_dropout.without_train": "random",
    "nn.functional.rrelu": "random", "nn.functional.gumbel_softmax": "random",
    "nn.functional.fractional_max_pool2d": "random", "nn.functional.fractional_max_pool3d": "random",
    "nn.functional.multi_head_attention_forward": "random (dropout)",
    "empty": "uninitialised", "empty_like": "uninitialised", "new_empty": "uninitialised",
    "new_empty_strided": "uninitialised", "empty_strided": "uninitialised",
    "empty_permuted": "uninitialised", "torch.empty": "uninitialised",
    "svd_lowrank": "random (draws without a generator)",
    "pca_lowrank": "random (draws without a generator)",
    "as_strided.partial_views": "reads outside the view: .to() copies the view, not its base",
    "as_strided_partial_views": "reads outside the view: .to() copies the view, not its base",
}

# What the hal device does not take by design, seen as the error it raises: sparse layouts
# (hal tensors are strided) and index arguments PyTorch wants on the CPU.
UNSUPPORTED_SAMPLE = ("Sparse", "sparse", "SparseTensorImpl", "to be on cpu", "on the CPU")

# Gradients that are only defined up to a choice the two devices make differently.
BACKWARD_NOT_COMPARABLE = {"linalg.eig": "eigenvector phases (ill-defined loss)",
                           "linalg.eigvals": "eigenvector phases"}

IGNORED_IN_METRICS = ("aten::_copy_from", "aten::_local_scalar_dense")


@dataclass
class Result:
    name: str
    status: str  # "pass", "fail", "skip"
    native: int = 0
    fallback: int = 0
    samples: int = 0
    message: str = ""

    @property
    def kind(self) -> str:
        """native: nothing fell back (views and copies only count as native too)."""
        if not self.fallback:
            return "native"
        if self.native:
            return "partial"
        return "fallback"


def full_name(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def tolerance(dtype: torch.dtype) -> dict:
    if dtype == torch.bfloat16:
        return {"atol": 1.6e-2, "rtol": 1.6e-2}
    if dtype == torch.float16:
        return {"atol": 2e-3, "rtol": 2e-3}
    return {"atol": 1e-3, "rtol": 1e-3}


def to_hal(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to("hal").requires_grad_(x.requires_grad)
    return x


def leaves(sample) -> list:
    found = []

    def visit(x):
        if isinstance(x, torch.Tensor):
            if x.requires_grad and x.is_leaf and (x.is_floating_point() or x.is_complex()):
                found.append(x)
        elif isinstance(x, (list, tuple)):
            for y in x:
                visit(y)
        elif isinstance(x, dict):
            for y in x.values():
                visit(y)

    visit(sample.input)
    visit(sample.args)
    visit(sample.kwargs)
    return found


def flat_outputs(out) -> list:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flat_outputs(o)]
    return []


def check(op, dtype: torch.dtype = torch.float32, max_samples: int | None = 8,
          backward: bool = True) -> Result:
    name = full_name(op)
    if name in NOT_COMPARABLE or op.name in NOT_COMPARABLE:
        return Result(name, "skip", message=NOT_COMPARABLE.get(name, NOT_COMPARABLE.get(op.name)))
    if dtype not in op.supported_dtypes("cpu"):
        return Result(name, "skip", message=f"no {dtype} on the CPU")
    grad = backward and op.supports_autograd and (dtype.is_floating_point or dtype.is_complex) \
        and name not in BACKWARD_NOT_COMPARABLE
    torch.manual_seed(0)
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad))
    except Exception as e:  # an OpInfo that cannot make samples here
        return Result(name, "skip", message=f"sample_inputs: {type(e).__name__}")
    if max_samples is not None:
        samples = samples[:max_samples]
    tol = tolerance(dtype)
    hal_torch.reset_metrics()
    checked = 0
    for i, sample in enumerate(samples):
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue  # the CPU refuses this sample: nothing to compare
        if float(sample.kwargs.get("dropout_p", 0) or 0) > 0:
            continue  # random: two devices' draws differ
        hal_sample = sample.transform(to_hal)
        try:
            actual = op(hal_sample.input, *hal_sample.args, **hal_sample.kwargs)
        except Exception as e:
            if any(s in str(e) for s in UNSUPPORTED_SAMPLE):
                continue
            return _finish(name, "fail", checked, f"sample {i} forward: {type(e).__name__}: "
                           f"{str(e).splitlines()[0][:300] if str(e) else ''}")
        try:
            expected_p = sample.output_process_fn_grad(expected)
            actual_p = hal_sample.output_process_fn_grad(actual)
            torch.testing.assert_close(
                _to_cpu(actual_p), expected_p, equal_nan=True, check_device=False,
                check_layout=False, **tol)
        except Exception as e:
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            if not _as_accurate_as_the_cpu(op, sample, dtype, actual_p, expected_p, tol, None):
                return _finish(name, "fail", checked, f"sample {i} forward: {why}")
        if grad:
            message = _check_backward(sample, hal_sample, expected, actual, tol)
            if message and not _as_accurate_as_the_cpu(op, sample, dtype, actual, expected, tol,
                                                        message):
                return _finish(name, "fail", checked, f"sample {i} backward: {message}")
        checked += 1
    if checked == 0:
        return _finish(name, "skip", 0, "no sample the CPU takes")
    return _finish(name, "pass", checked, "")


# 16-bit results that disagree with the CPU's beyond PyTorch's tolerance are judged against
# float64: two 16-bit computations in different orders (or the CPU rounding an intermediate to
# bfloat16, as its div(rounding_mode="trunc") and fmod's gradient do) may each be off by an
# ulp of a large intermediate. HAL passes when its error against float64 is at most this many
# times the CPU's, plus the atol.
ACCURACY_MULTIPLE = 2.0


def _to_float64(x):
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.detach().double().requires_grad_(x.requires_grad)
    return x


def _as_accurate_as_the_cpu(op, sample, dtype, actual, expected, tol, backward) -> bool:
    """For 16-bit dtypes: True when HAL's outputs (or, with |backward| set, its gradients)
    are as close to a float64 run of the same sample as the CPU's are (ACCURACY_MULTIPLE)."""
    if dtype not in (torch.bfloat16, torch.float16) or \
            torch.float64 not in op.supported_dtypes("cpu"):
        return False
    try:
        sample64 = sample.transform(_to_float64)
        ref = op(sample64.input, *sample64.args, **sample64.kwargs)
        if backward is None:
            triples = zip(flat_outputs(actual), flat_outputs(expected),
                          flat_outputs(sample64.output_process_fn_grad(ref)))
        else:
            g = torch.Generator().manual_seed(7)
            # Both 16-bit forwards again: the comparison that failed consumed their graphs.
            cpu_res = op(sample.input, *sample.args, **sample.kwargs)
            outs = [o for o in flat_outputs(sample.output_process_fn_grad(cpu_res))
                    if o.requires_grad and o.is_floating_point()]
            grad_outputs = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outs]
            ref_out = [o for o in flat_outputs(sample64.output_process_fn_grad(ref))
                       if o.requires_grad and o.is_floating_point()]
            hal_sample = sample.transform(to_hal)
            hal_leaves = leaves(hal_sample)
            hal_res = op(hal_sample.input, *hal_sample.args, **hal_sample.kwargs)
            hal_out = [o for o in flat_outputs(hal_sample.output_process_fn_grad(hal_res))
                       if o.requires_grad and o.is_floating_point()]
            cpu_grads = torch.autograd.grad(outs, leaves(sample), grad_outputs, allow_unused=True)
            hal_grads = torch.autograd.grad(hal_out, hal_leaves,
                                            [t.to("hal") for t in grad_outputs], allow_unused=True)
            ref_grads = torch.autograd.grad(ref_out, leaves(sample64),
                                            [t.double() for t in grad_outputs], allow_unused=True)
            triples = zip(hal_grads, cpu_grads, ref_grads)
        for h, c, r in triples:
            if h is None and c is None:
                continue
            h, c, r = h.detach().cpu().double(), c.detach().double(), r.detach().double()
            finite = torch.isfinite(r)
            if not torch.equal(torch.isfinite(h), finite):
                return False
            hal_error = (h - r)[finite].abs().max().item() if finite.any() else 0.0
            cpu_error = (c - r)[finite].abs().max().item() if finite.any() else 0.0
            if hal_error > ACCURACY_MULTIPLE * cpu_error + tol["atol"]:
                return False
        return True
    except Exception:
        return False


def _to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cpu(y) for y in x) if not hasattr(x, "_fields") else \
            type(x)(*(_to_cpu(y) for y in x))
    return x


def _check_backward(sample, hal_sample, expected, actual, tol) -> str:
    cpu_leaves = leaves(sample)
    hal_leaves = leaves(hal_sample)
    cpu_out = [o for o in flat_outputs(sample.output_process_fn_grad(expected))
               if o.requires_grad and (o.is_floating_point() or o.is_complex())]
    hal_out = [o for o in flat_outputs(hal_sample.output_process_fn_grad(actual))
               if o.requires_grad and (o.is_floating_point() or o.is_complex())]
    if not cpu_leaves or not cpu_out:
        return ""
    if len(cpu_out) != len(hal_out) or len(cpu_leaves) != len(hal_leaves):
        return "different differentiable outputs or inputs"
    g = torch.Generator().manual_seed(7)
    grad_outputs = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in cpu_out]
    try:
        cpu_grads = torch.autograd.grad(cpu_out, cpu_leaves, grad_outputs, allow_unused=True)
    except Exception:
        return ""  # the CPU cannot differentiate this sample
    try:
        hal_grads = torch.autograd.grad(
            hal_out, hal_leaves, [t.to(o.device) for t, o in zip(grad_outputs, hal_out)],
            allow_unused=True)
        for c, h in zip(cpu_grads, hal_grads):
            if c is None and h is None:
                continue
            if (c is None) != (h is None):
                # An unused input: zero on one side, None on the other, is the same gradient.
                present = c if c is not None else h.cpu()
                if bool(torch.count_nonzero(present)):
                    return "a gradient is missing on one side"
                continue
            torch.testing.assert_close(h.cpu(), c, equal_nan=True, **tol)
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
    return ""


def _finish(name, status, checked, message) -> Result:
    ops = {k: v for k, v in hal_torch.metrics()["ops"].items() if k not in IGNORED_IN_METRICS}
    return Result(name, status, sum(v["native"] for v in ops.values()),
                  sum(v["fallback"] for v in ops.values()), checked, message)


def op_db():
    from torch.testing._internal.common_methods_invocations import op_db as db
    return db


def expected_list(path: str) -> list[str]:
    with open(path) as f:
        return [line.split("#")[0].strip() for line in f if line.split("#")[0].strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="every OpInfo (else the expected list)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--samples", type=int, default=0, help="per op; 0 = all")
    parser.add_argument("--expected", default=os.path.join(os.path.dirname(__file__),
                                                           "opinfo_expected.txt"))
    parser.add_argument("--write", help="write the names that pass natively here")
    parser.add_argument("--verbose", action="store_true", help="name each op before it runs")
    parser.add_argument("--start", help="begin at this OpInfo")
    args = parser.parse_args()
    hal_torch.set_fallback_mode("silent")
    dtype = getattr(torch, args.dtype)
    wanted = None if args.all else set(expected_list(args.expected))
    results = []
    started = time.perf_counter()
    begun = args.start is None
    for op in op_db():
        begun = begun or full_name(op) == args.start
        if not begun or (wanted is not None and full_name(op) not in wanted):
            continue
        if args.verbose:
            print("op", full_name(op), flush=True)
        results.append(check(op, dtype, args.samples or None))
    report(results, time.perf_counter() - started)
    if args.write:
        with open(args.write, "w") as f:
            for r in results:
                if r.status == "pass" and r.kind == "native":
                    f.write(r.name + "\n")
    return 0


def report(results: list[Result], seconds: float) -> None:
    by = {}
    for r in results:
        key = r.status if r.status != "pass" else f"pass ({r.kind})"
        by.setdefault(key, []).append(r)
    print(f"opinfo: {len(results)} OpInfos in {seconds:.1f} s: " +
          ", ".join(f"{k} {len(v)}" for k, v in sorted(by.items())))
    for r in by.get("fail", []):
        print(f"  FAIL {r.name} [{r.kind}]: {r.message}")


if __name__ == "__main__":
    sys.exit(main())
