#pragma once
// Which file a run-time compiler was loaded from, as far as a kernel cache
// key needs it: a compiler's reported version (nvrtcVersion, hiprtcVersion)
// names only major.minor, while a patch release or a rebuilt library may
// emit different code under the same numbers.

#include <string>

namespace hal::util {

// "<path> size <bytes> mtime <ns> inode <n>" of the shared object that holds
// |symbol| (dladdr, then stat), or "unknown library" when it cannot be told.
std::string library_identity(const void* symbol);

}  // namespace hal::util
