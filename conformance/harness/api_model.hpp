// What halconform knows about HAL's API, read from the public headers at build
// time (conformance/model/api_model_gen.cpp writes api_model.cpp): the
// functions and the results their comments document, the enums and flag
// types, the structs a caller passes in, and the op descriptor of each
// hal_op_kind_t. The coverage report's list of paths is built from it, so a
// new function, enumerator or field is a path the suite must exercise.
#ifndef HAL_CONFORMANCE_HARNESS_API_MODEL_HPP_
#define HAL_CONFORMANCE_HARNESS_API_MODEL_HPP_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace halconform::model {

struct EnumValue {
  const char* name;  // "HAL_MEMORY_HOST"
  int64_t value;
};

struct EnumType {
  const char* name;  // the typedef, "hal_memory_kind_t"
  bool bitmask;      // a *_bits enum: its values are bits of a flags type
  bool input;        // a caller passes it (a parameter, or a field of an input struct)
  std::span<const EnumValue> values;
};

enum class FieldKind { kScalar, kPointer, kEnum, kFlags, kStruct, kArray };

struct Field {
  const char* name;
  size_t offset;
  size_t size;
  FieldKind kind;
  const char* type;  // the enum (kEnum, kFlags) or struct (kStruct) type, else nullptr
};

struct StructType {
  const char* name;  // "hal_launch_config_t"
  size_t size;
  std::span<const Field> fields;
};

struct OpDescriptor {
  int64_t kind;            // a hal_op_kind_t
  const char* kind_name;   // "HAL_OP_SOFTMAX"
  const char* descriptor;  // "hal_op_softmax_desc_t"
};

struct Function {
  const char* name;
  const char* header;          // "hal/memory.h"
  bool returns_result;         // returns hal_result_t
  const char* const* results;  // the results its comment documents, nullptr-terminated
};

std::span<const EnumType> enums();
std::span<const StructType> structs();
std::span<const OpDescriptor> op_descriptors();
std::span<const Function> functions();

inline const EnumType* find_enum(std::string_view name) {
  for (const EnumType& e : enums()) {
    if (name == e.name) return &e;
  }
  return nullptr;
}
inline const StructType* find_struct(std::string_view name) {
  for (const StructType& s : structs()) {
    if (name == s.name) return &s;
  }
  return nullptr;
}
// The enumerator's name, or nullptr when |value| is none of |type|'s.
inline const char* enum_name(const EnumType& type, int64_t value) {
  for (const EnumValue& v : type.values) {
    if (v.value == value) return v.name;
  }
  return nullptr;
}
// "HAL_DTYPE_BF16" for a value of the enum |type_name|, or "7 (not a hal_dtype_t)".
std::string enum_label(std::string_view type_name, int64_t value);

// Fields a caller never chooses: the struct header and reserved words.
inline bool is_bookkeeping_field(std::string_view field) {
  return field == "struct_size" || field == "next" || field.starts_with("reserved");
}

}  // namespace halconform::model

#endif  // HAL_CONFORMANCE_HARNESS_API_MODEL_HPP_
