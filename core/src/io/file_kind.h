#pragma once
// What a path is, in words, for messages that refuse it ("a directory", "a FIFO", ...).

#include <sys/stat.h>

namespace tandem::io {

const char* kind_of_file(mode_t mode);

}  // namespace tandem::io
