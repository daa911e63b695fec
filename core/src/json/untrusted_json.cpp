#include "json/untrusted_json.h"

#include <set>
#include <string>
#include <vector>

#include "tandem/core/error.h"

namespace tandem::json {

// Note [Depth before parsing]: nlohmann's parser keeps its own stack, but destroying, copying, comparing or printing
// a parsed value recurses once per level, so 100000 nested '[' parse fine and then overflow the stack when the value
// (or an error message built from it) is touched. The bound is therefore checked on the raw bytes, before any value
// exists. The scan is linear; a malformed text can fool the count only past the point where the parser refuses it
// anyway (the first unbalanced bracket or unterminated string).
void check_raw_json(std::string_view text, std::string_view where, size_t max_depth) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      TANDEM_CHECK(++depth <= max_depth, where, "the JSON nests arrays and objects more than ", max_depth,
                   " levels deep (at byte ", i, ")");
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;  // unbalanced text is the parser's to report
    } else if (c == '\0') {
      TANDEM_FAIL(where, "the JSON holds a NUL byte at byte ", i, " (", text.size() - i - 1,
                  " bytes after it), which is not JSON");
    }
  }
}

nlohmann::json parse_untrusted(std::string_view text, std::string_view where, size_t max_depth) {
  check_raw_json(text, where, max_depth);
  // One set of keys per open object; arrays push nothing.
  std::vector<std::set<std::string>> keys;
  const auto refuse_duplicates = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& value) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) {
      keys.emplace_back();
    } else if (event == Event::object_end) {
      keys.pop_back();
    } else if (event == Event::key) {
      const std::string& key = value.get_ref<const std::string&>();
      TANDEM_CHECK(keys.back().insert(key).second, where, "the JSON repeats the key \"", excerpt(key),
                   "\" in one object");
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), refuse_duplicates);
  } catch (const nlohmann::json::exception& e) {
    TANDEM_FAIL(where, "invalid JSON: ", excerpt(e.what(), 200));
  }
}

}  // namespace tandem::json
