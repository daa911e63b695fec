# Writes a C++ source defining `std::string_view <FUNCTION>()` (in namespace NAMESPACE, declared in HEADER) that
# returns the bytes of INPUT. Run as: cmake -DINPUT=... -DOUTPUT=... -DNAMESPACE=... -DFUNCTION=... -DHEADER=...
# -P embed_file.cmake
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
set(lines "")
set(offset 0)
while(offset LESS hex_length)
  string(SUBSTRING "${hex}" ${offset} 32 chunk)  # 16 bytes per line
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," chunk "${chunk}")
  string(APPEND lines "    ${chunk}\n")
  math(EXPR offset "${offset} + 32")
endwhile()
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUT} by embed_file.cmake; do not edit.
#include \"${HEADER}\"

namespace ${NAMESPACE} {
namespace {
constexpr char kBytes[${size} + 1] = {
${lines}    '\\0'};
}  // namespace

std::string_view ${FUNCTION}() { return std::string_view(kBytes, ${size}); }

}  // namespace ${NAMESPACE}
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
