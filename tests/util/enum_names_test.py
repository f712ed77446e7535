#!/usr/bin/env python3
"""Every enumerator of the public headers has a name in hal_util's tables.

Reads api/hal/*.h for every `typedef enum name HAL_ENUM_TYPE { ... } name_t;`
(an enum without HAL_ENUM_TYPE is an error: it loses the fixed C++ type) and util/names.cpp
for every `constexpr EnumName kTable[] = { ... };`, then requires:
  - each public enum is either mapped to a table below or listed as
    deliberately unnamed (so a new enum is a decision, not an accident);
  - each enumerator of a mapped enum (less the *_MAX_ENUM / *_COUNT /
    *_OP_COUNT markers) has an entry {ENUMERATOR, "ENUMERATOR", "short"} in
    its table, with short = the enumerator without the enum's prefix, lower
    case;
  - a table names nothing that is not an enumerator of its enum;
  - hal_arg_type_t's table (util/include/hal_util/arg_types.hpp, which
    names.cpp's kArgType is derived from) names every argument type with
    its enumerator, short name, a signature token and a size.
Usage: enum_names_test.py SOURCE_ROOT
"""
import pathlib
import re
import sys

# enum typedef -> (table array in util/names.cpp, enumerator prefix)
TABLES = {
    "hal_device_cap_bits_t": ("kCapability", "HAL_DEVICE_CAP_"),
    "hal_module_format_t": ("kModuleFormat", "HAL_MODULE_FORMAT_"),
    "hal_memory_kind_t": ("kMemoryKind", "HAL_MEMORY_"),
    "hal_dtype_t": ("kDtype", "HAL_DTYPE_"),
    "hal_arg_type_t": ("kArgType", "HAL_ARG_"),
    "hal_device_type_t": ("kDeviceType", "HAL_DEVICE_TYPE_"),
    "hal_plugin_outcome_t": ("kPluginOutcome", "HAL_PLUGIN_"),
    "hal_result_t": ("kResult", "HAL_"),
    "hal_reduce_op_t": ("kReduceOp", "HAL_REDUCE_"),
    "hal_collective_kind_t": ("kCollectiveKind", "HAL_COLLECTIVE_"),
    "hal_op_kind_t": ("kOpKind", "HAL_OP_"),
    "hal_activation_t": ("kActivation", "HAL_ACTIVATION_"),
    "hal_norm_kind_t": ("kNormKind", "HAL_NORM_"),
    "hal_binary_op_t": ("kBinaryOp", "HAL_BINARY_"),
    "hal_reduce_kind_t": ("kReduceKind", "HAL_REDUCE_KIND_"),
    "hal_unary_math_t": ("kUnaryMath", "HAL_UNARY_MATH_"),
    "hal_clamp_bound_t": ("kClampBound", "HAL_CLAMP_BOUND_"),
    "hal_scan_kind_t": ("kScanKind", "HAL_SCAN_"),
    "hal_scatter_mode_t": ("kScatterMode", "HAL_SCATTER_"),
    "hal_causal_alignment_t": ("kCausalAlignment", "HAL_CAUSAL_"),
    "hal_attention_sparsity_t": ("kAttentionSparsity", "HAL_ATTENTION_"),
    "hal_channel_layout_t": ("kChannelLayout", "HAL_CHANNELS_"),
    "hal_pooling_kind_t": ("kPoolingKind", "HAL_POOLING_"),
    "hal_op_status_t": ("kOpStatus", "HAL_OP_STATUS_"),
    "hal_op_verdict_t": ("kOpVerdict", "HAL_OP_VERDICT_"),
}
# Enums nothing prints by name (flags with no bit beyond NONE, a log level
# the plugin host takes, the bootstrap a config selects).
UNNAMED = {
    "hal_event_flag_bits_t",
    "hal_stream_flag_bits_t",
    "hal_log_level_t",
    "hal_comm_bootstrap_t",
    "hal_op_plan_flag_bits_t",
    "hal_matmul_flag_bits_t",
    "hal_matmul_operand_t",
    "hal_conv_flag_bits_t",
    "hal_pooling_flag_bits_t",
    "hal_batch_norm_flag_bits_t",
    "hal_group_norm_flag_bits_t",
    "hal_quantize_flag_bits_t",
    "hal_fake_quantize_flag_bits_t",
}
MARKER = re.compile(r"_(MAX_ENUM|COUNT)$")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def header_enums(api_dir, errors):
    enums = {}
    for header in sorted(api_dir.glob("hal/*.h")):
        text = strip_comments(header.read_text())
        # HAL_ENUM_TYPE (hal/result.h) gives C++ a fixed underlying type, so
        # an out-of-range value a C caller passes is not undefined behaviour.
        for plain in re.findall(r"\benum\s+(\w*)\s*\{", text):
            errors.append(f"{header.name}: enum {plain or '(anonymous)'} has no HAL_ENUM_TYPE; "
                          "declare it `typedef enum name HAL_ENUM_TYPE {...}`")
        for body, name in re.findall(
                r"typedef\s+enum\s+\w+\s+HAL_ENUM_TYPE\s*\{(.*?)\}\s*(\w+)\s*;", text,
                flags=re.S):
            names = [m.group(1) for m in re.finditer(r"\b(HAL_\w+)\s*(=|,|$)", body)]
            enums[name] = [n for n in names if not MARKER.search(n)]
    return enums


def tables(source):
    text = strip_comments(source.read_text())
    found = {}
    for name, body in re.findall(r"constexpr\s+EnumName\s+(\w+)\[\]\s*=\s*\{(.*?)\};", text,
                                 flags=re.S):
        found[name] = re.findall(r'\{\s*(\w+)\s*,\s*"(\w+)"\s*,\s*"(\w+)"\s*\}', body)
    return found


def main():
    root = pathlib.Path(sys.argv[1])
    errors = []
    enums = header_enums(root / "api", errors)
    named = tables(root / "util" / "names.cpp")
    # Argument types: one table gives the enumerator, the short name, the
    # signature token ("ptr,u32,f32") and the size; names.cpp derives kArgType.
    arg_types = root / "util" / "include" / "hal_util" / "arg_types.hpp"
    text = strip_comments(arg_types.read_text())
    match = re.search(r"kArgTypes\[\]\s*=\s*\{(.*?)\};", text, flags=re.S)
    rows = re.findall(r'\{\s*(HAL_ARG_\w+)\s*,\s*"(\w+)"\s*,\s*"(\w+)"\s*,\s*"(\w+)"\s*,\s*(\d+)\s*\}',
                      match.group(1)) if match else []
    if not rows:
        errors.append(f"no kArgTypes table found in {arg_types}")
    named["kArgType"] = [(value, spelled, short) for value, spelled, short, _, _ in rows]
    tokens = [token for _, _, _, token, _ in rows]
    if len(set(tokens)) != len(tokens):
        errors.append(f"{arg_types.name}: two argument types share a signature token")
    if not enums:
        errors.append("no enums found in api/hal/*.h (parser out of date?)")
    for enum in sorted(enums):
        if enum not in TABLES and enum not in UNNAMED:
            errors.append(f"{enum}: a public enum with no table in util/names.cpp "
                          "(add one, or list it in UNNAMED here with the reason)")
    for enum, (table, prefix) in sorted(TABLES.items()):
        if enum not in enums:
            errors.append(f"{enum}: mapped to {table} but not found in api/hal/*.h")
            continue
        if table not in named:
            errors.append(f"{table}: table for {enum} not found in util/names.cpp")
            continue
        entries = {value: (spelled, short) for value, spelled, short in named[table]}
        for enumerator in enums[enum]:
            if enumerator not in entries:
                errors.append(f"{enumerator} ({enum}) has no name in {table}")
                continue
            spelled, short = entries[enumerator]
            expected_short = enumerator[len(prefix):].lower()
            if spelled != enumerator:
                errors.append(f"{enumerator}: {table} spells it \"{spelled}\"")
            if short != expected_short:
                errors.append(f"{enumerator}: {table} short name \"{short}\", "
                              f"expected \"{expected_short}\"")
        for value in entries:
            if value not in enums[enum]:
                errors.append(f"{table} names {value}, which is not an enumerator of {enum}")
    for error in errors:
        print("FAIL:", error)
    checked = sum(len(enums.get(e, [])) for e in TABLES)
    print(f"{checked} enumerators of {len(TABLES)} enums checked, {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
