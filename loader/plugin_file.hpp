// Which files the loader agrees to dlopen: a plugin runs with the process's
// privileges, so a file another local user could have written, or one that is
// not a regular file at all (a FIFO blocks the reader, /dev/zero never ends),
// is refused before it is opened.
#pragma once

#include <string>

namespace hal::loader {

// Why |path| (absolute) must not be loaded, or "" when it may. Checks that it
// is a regular file, that neither it nor its directory (the one named and,
// through a symbolic link, the real one) is world-writable, and that each is
// owned by root or by the effective user. Never blocks: the file is only
// opened once stat says it is a regular file, and then with O_NONBLOCK.
std::string plugin_file_refusal(const std::string& path);

}  // namespace hal::loader
