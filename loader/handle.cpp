#include "handle.hpp"

#include "error.hpp"

namespace hal::loader {

namespace {

const char* article(HandleKind kind) {
  return kind == HandleKind::kEvent ? "an" : "a";
}

}  // namespace

const char* kind_name(HandleKind kind) noexcept {
  switch (kind) {
    case HandleKind::kDevice:
      return "device";
    case HandleKind::kStream:
      return "stream";
    case HandleKind::kEvent:
      return "event";
    case HandleKind::kModule:
      return "module";
    case HandleKind::kKernel:
      return "kernel";
    case HandleKind::kComm:
      return "communicator";
  }
  return "unknown";
}

hal_result_t reject_handle(const void* handle, HandleKind expected, const char* function,
                           const char* argument) noexcept {
  if (handle == nullptr) {
    return fail(HAL_ERROR_INVALID_HANDLE, function, "%s is NULL, expected %s %s handle", argument,
                article(expected), kind_name(expected));
  }
  // Every handle the loader gave out starts with a DispatchHeader; anything
  // else is foreign and reading its first bytes is the best check available.
  const auto* header = static_cast<const DispatchHeader*>(handle);
  const uint32_t magic = header->magic.load(std::memory_order_relaxed);
  const uint32_t kind = header->kind;
  const bool known_kind = kind >= static_cast<uint32_t>(HandleKind::kDevice) &&
                          kind <= static_cast<uint32_t>(HandleKind::kComm);
  if (magic == kDestroyedMagic && kind == static_cast<uint32_t>(expected)) {
    return fail(HAL_ERROR_DESTROYED_HANDLE, function, "%s %p is a %s that was already destroyed",
                argument, handle, kind_name(expected));
  }
  if ((magic == kLiveMagic || magic == kDestroyedMagic) && known_kind) {
    return fail(HAL_ERROR_INVALID_HANDLE, function, "%s %p is a %s%s handle, not %s %s handle",
                argument, handle, magic == kDestroyedMagic ? "destroyed " : "",
                kind_name(static_cast<HandleKind>(kind)), article(expected), kind_name(expected));
  }
  return fail(HAL_ERROR_INVALID_HANDLE, function,
              "%s %p is not a HAL handle (expected %s %s handle)", argument, handle,
              article(expected), kind_name(expected));
}

}  // namespace hal::loader
