#pragma once
// The temp files of AtomicFile: their names, their creation, and the removal of those that dead processes left
// behind. See Note [Temp file names] in temp_files.cpp.

#include <string>
#include <string_view>

namespace tandem::detail {

// ".<name>.tandem-tmp.<hostname>.": the start of the name of every temp file for `name` made on this host.
std::string temp_file_prefix(std::string_view name);

// Creates a new temp file for the target `name` in `directory`, named temp_file_prefix(name) + "<pid>.<counter>",
// with O_CREAT | O_EXCL | O_CLOEXEC and mode 0666 (less the umask). Returns its descriptor and sets `temp_path`;
// returns -1 with errno set when it cannot be created.
int create_temp_file(const std::string& directory, std::string_view name, std::string& temp_path);

// Removes the temp files for `name` in `directory` that this host's dead processes left behind (their pid no longer
// exists). Best effort: a directory that cannot be listed or a file that cannot be removed is left as it is.
void remove_stale_temp_files(const std::string& directory, std::string_view name) noexcept;

}  // namespace tandem::detail
