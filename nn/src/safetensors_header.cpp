#include "safetensors_header.h"

#include <algorithm>
#include <array>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "json/untrusted_json.h"
#include "tandem/core/error.h"

namespace tandem::safetensors {
namespace {

// The dtypes tandem reads and writes, by their names in the format.
constexpr std::array<std::pair<std::string_view, DType>, 3> kSupportedDtypes = {
    {{"F32", DType::Float32}, {"I64", DType::Int64}, {"BF16", DType::BFloat16}}};
// Every dtype the format defines, so that a message can tell "not supported here" from "not a dtype at all".
constexpr std::array<std::string_view, 15> kFormatDtypes = {
    "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"};

std::string in_quotes(std::string_view text) { return detail::concat("'", excerpt(text), "'"); }

// nlohmann's message quotes the whole offending token ("last read: '...'"), which a hostile header makes as long as
// itself: keep the explanation before it and an excerpt of the token.
std::string json_error_text(const std::string& what, const std::string& last_token) {
  const size_t cut = what.find("; last read: ");
  std::string text = excerpt(std::string_view(what).substr(0, cut), 200);
  if (cut != std::string::npos) text += "; last read: " + in_quotes(last_token);
  return text;
}

// One value as the SAX parser announces it: a scalar, or the start of an array or object.
struct JsonValue {
  enum class Kind { Null, Boolean, Integer, Unsigned, Float, String, Array, Object };
  Kind kind;
  uint64_t unsigned_value = 0;  // Unsigned
  std::string_view text = {};   // String: the value; Float: the number as written; Null, Boolean, Integer: shown

  // The value for a message, e.g. "-2", "1.5", "'F32'", "an array".
  std::string describe() const {
    switch (kind) {
      case Kind::Unsigned:
        return std::to_string(unsigned_value);
      case Kind::String:
        return "the string " + in_quotes(text);
      case Kind::Array:
        return "an array";
      case Kind::Object:
        return "an object";
      default:
        return excerpt(text);
    }
  }
};

// Note [Header schema]: the header is checked while nlohmann parses it, by this SAX handler, rather than parsed into
// a nlohmann::json first: nothing but the schema's values is ever stored (no DOM several times the header's size),
// a key repeated in any object is seen (a DOM keeps the last one silently), and every message names the tensor.
// The schema is flat, so a state says where the parser is: the top-level object maps tensor names to entries
// {"dtype": "F32", "shape": [sizes], "data_offsets": [begin, end]} and "__metadata__" to an object of strings.
// Every method returns true or throws tandem::Error.
class HeaderHandler {
 public:
  explicit HeaderHandler(const std::string& where) : where_(where) {}
  Header take() { return std::move(header_); }

  bool null() { return value({JsonValue::Kind::Null, 0, "null"}); }
  bool boolean(bool flag) { return value({JsonValue::Kind::Boolean, 0, flag ? "true" : "false"}); }
  bool number_integer(int64_t number) {  // nlohmann reports non-negative integers as unsigned: this one is < 0
    const std::string shown = std::to_string(number);
    return value({JsonValue::Kind::Integer, 0, shown});
  }
  bool number_unsigned(uint64_t number) { return value({JsonValue::Kind::Unsigned, number}); }
  bool number_float(double, const std::string& written) { return value({JsonValue::Kind::Float, 0, written}); }
  bool string(std::string& text) { return value({JsonValue::Kind::String, 0, text}); }
  bool binary(nlohmann::json::binary_t&) { return value({JsonValue::Kind::Null, 0, "binary data"}); }  // not in JSON
  bool start_object(size_t) { return value({JsonValue::Kind::Object}); }
  bool start_array(size_t) { return value({JsonValue::Kind::Array}); }

  bool key(std::string& key) {
    switch (state_) {
      case State::Tensors:
        TANDEM_CHECK(names_.insert(key).second, where_, "the header has the key ", in_quotes(key), " twice");
        if (key == kMetadataKey) {
          value_of_metadata_ = true;
        } else {
          TANDEM_CHECK(header_.tensors.size() < kMaxTensors, where_, "the header describes more than ", kMaxTensors,
                       " tensors");
          value_of_metadata_ = false;
          entry_ = TensorEntry{};
          entry_.name = key;
        }
        return true;
      case State::Entry: {
        field_ = field_named(key);
        const unsigned bit = 1u << static_cast<unsigned>(field_);
        TANDEM_CHECK((fields_seen_ & bit) == 0, where_, tensor(), " has the key ", in_quotes(key), " twice");
        fields_seen_ |= bit;
        return true;
      }
      default:  // State::Metadata: the only other object
        TANDEM_CHECK(!header_.metadata.contains(key), where_, "__metadata__ has the key ", in_quotes(key), " twice");
        metadata_key_ = key;
        return true;
    }
  }

  bool end_object() {
    if (state_ == State::Entry) {
      for (Field field : {Field::Dtype, Field::Shape, Field::Offsets})
        TANDEM_CHECK(fields_seen_ & (1u << static_cast<unsigned>(field)), where_, tensor(), " has no ",
                     field_name(field));
      header_.tensors.push_back(std::move(entry_));
    }
    state_ = state_ == State::Tensors ? State::Done : State::Tensors;  // from Entry or Metadata
    return true;
  }

  bool end_array() {
    if (state_ == State::Offsets)
      TANDEM_CHECK(offsets_seen_ == 2, where_, tensor(), " has data_offsets with ", offsets_seen_,
                   " elements, but expected [begin, end]");
    state_ = State::Entry;  // from Shape or Offsets
    return true;
  }

  bool parse_error(size_t position, const std::string& last_token, const nlohmann::detail::exception& error) {
    TANDEM_FAIL(where_, "the header is not valid JSON: ", json_error_text(error.what(), last_token));
  }

 private:
  enum class State { Document, Tensors, Entry, Shape, Offsets, Metadata, Done };
  enum class Field : unsigned { Dtype, Shape, Offsets };

  static const char* field_name(Field field) {
    return field == Field::Dtype ? "dtype" : field == Field::Shape ? "shape" : "data_offsets";
  }
  Field field_named(std::string_view key) const {
    for (Field field : {Field::Dtype, Field::Shape, Field::Offsets})
      if (key == field_name(field)) return field;
    TANDEM_FAIL(where_, tensor(), " has the unknown key ", in_quotes(key),
                " (an entry has only dtype, shape and data_offsets)");
  }
  std::string tensor() const { return "tensor " + in_quotes(entry_.name); }

  bool value(const JsonValue& v) {
    using Kind = JsonValue::Kind;
    switch (state_) {
      case State::Document:  // parse_header has seen the '{'
        state_ = State::Tensors;
        return true;
      case State::Tensors:
        if (value_of_metadata_) {
          TANDEM_CHECK(v.kind == Kind::Object, where_, "__metadata__ is ", v.describe(), ", not a JSON object");
          state_ = State::Metadata;
        } else {
          TANDEM_CHECK(v.kind == Kind::Object, where_, tensor(), " is described by ", v.describe(),
                       ", not by a JSON object");
          state_ = State::Entry;
          fields_seen_ = 0;
        }
        return true;
      case State::Entry:
        entry_value(v);
        return true;
      case State::Shape:
        TANDEM_CHECK(v.kind == Kind::Unsigned && v.unsigned_value <= uint64_t{std::numeric_limits<int64_t>::max()},
                     where_, tensor(), " has the shape size ", v.describe(),
                     ", but sizes are integers in [0, 2^63 - 1]");
        TANDEM_CHECK(entry_.shape.size() < kMaxRank, where_, tensor(), " has a shape of more than ", kMaxRank,
                     " dimensions");
        entry_.shape.push_back(static_cast<int64_t>(v.unsigned_value));
        return true;
      case State::Offsets:
        TANDEM_CHECK(v.kind == Kind::Unsigned, where_, tensor(), " has the data_offsets element ", v.describe(),
                     ", but offsets are non-negative integers");
        TANDEM_CHECK(offsets_seen_ < 2, where_, tensor(),
                     " has data_offsets with more than 2 elements, but expected [begin, end]");
        (offsets_seen_++ == 0 ? entry_.begin : entry_.end) = v.unsigned_value;
        return true;
      default:  // State::Metadata; Done cannot see values, nlohmann refuses anything after the top-level object
        TANDEM_CHECK(v.kind == Kind::String, where_, "__metadata__ entry ", in_quotes(metadata_key_), " is ",
                     v.describe(), ", not a string");
        header_.metadata.emplace(std::move(metadata_key_), v.text);
        return true;
    }
  }

  void entry_value(const JsonValue& v) {
    using Kind = JsonValue::Kind;
    switch (field_) {
      case Field::Dtype:
        TANDEM_CHECK(v.kind == Kind::String, where_, tensor(), " has the dtype ", v.describe(),
                     ", but a dtype is a string such as \"F32\"");
      {
        const auto supported = std::find_if(kSupportedDtypes.begin(), kSupportedDtypes.end(),
                                            [&](const auto& known) { return known.first == v.text; });
        TANDEM_CHECK(supported != kSupportedDtypes.end(), where_, tensor(), " has dtype ", in_quotes(v.text),
                     std::find(kFormatDtypes.begin(), kFormatDtypes.end(), v.text) != kFormatDtypes.end()
                         ? ", but only F32, I64 and BF16 are supported"
                         : ", which is not a safetensors dtype (and only F32, I64 and BF16 are supported)");
        entry_.dtype = supported->second;
        return;
      }
      case Field::Shape:
        TANDEM_CHECK(v.kind == Kind::Array, where_, tensor(), " has the shape ", v.describe(),
                     ", but a shape is an array of sizes");
        state_ = State::Shape;
        return;
      case Field::Offsets:
        TANDEM_CHECK(v.kind == Kind::Array, where_, tensor(), " has the data_offsets ", v.describe(),
                     ", but expected [begin, end]");
        state_ = State::Offsets;
        offsets_seen_ = 0;
        return;
    }
  }

  const std::string& where_;
  Header header_;
  State state_ = State::Document;
  std::set<std::string> names_;  // top-level keys so far
  bool value_of_metadata_ = false;
  TensorEntry entry_;           // the entry being parsed
  Field field_ = Field::Dtype;  // the entry's key whose value comes next
  unsigned fields_seen_ = 0;    // bit per Field
  size_t offsets_seen_ = 0;
  std::string metadata_key_;  // the __metadata__ key whose value comes next
};

}  // namespace

std::string_view format_dtype(DType dtype) {
  for (const auto& [name, known] : kSupportedDtypes)
    if (known == dtype) return name;
  TANDEM_INTERNAL_ASSERT(false, "safetensors::format_dtype: no format name for ", dtype);
}

namespace {

std::string range_of(const TensorEntry& entry) { return detail::concat("[", entry.begin, ", ", entry.end, "]"); }

// Each tensor's range against its shape and the data section, then the ranges together (see parse_header).
void check_layout(std::vector<TensorEntry>& tensors, uint64_t data_size, const std::string& where) {
  for (const TensorEntry& entry : tensors) {
    const std::string tensor = "tensor " + in_quotes(entry.name);
    const size_t needed = checked_nbytes(entry.shape, element_size(entry.dtype), (where + tensor).c_str());
    TANDEM_CHECK(entry.begin <= entry.end, where, tensor, " has data_offsets ", range_of(entry),
                 " that end before they begin");
    TANDEM_CHECK(entry.end <= data_size, where, tensor, " has data_offsets ", range_of(entry),
                 " outside the data section of ", data_size, " bytes");
    TANDEM_CHECK(entry.end - entry.begin == needed, where, tensor, " has data_offsets ", range_of(entry), " (",
                 entry.end - entry.begin, " bytes) but its shape ", to_string(entry.shape), " needs ", needed,
                 " bytes");
  }
  std::sort(tensors.begin(), tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& entry : tensors) {
    const uint64_t expected = previous == nullptr ? 0 : previous->end;
    TANDEM_CHECK(entry.begin >= expected, where, "tensors ", in_quotes(previous->name), " ", range_of(*previous),
                 " and ", in_quotes(entry.name), " ", range_of(entry), " overlap in the data section");
    TANDEM_CHECK(entry.begin == expected, where, "the data section has ", entry.begin - expected,
                 " bytes that no tensor covers before tensor ", in_quotes(entry.name), " ", range_of(entry), " (",
                 previous == nullptr ? std::string("at its start")
                                     : "after tensor " + in_quotes(previous->name) + " " + range_of(*previous),
                 ")");
    previous = &entry;
  }
  const uint64_t covered = previous == nullptr ? 0 : previous->end;
  TANDEM_CHECK(covered == data_size, where, "the data section has ", data_size - covered,
               " trailing bytes that no tensor covers (the tensors end at byte ", covered, " of ", data_size, ")");
}

}  // namespace

Header parse_header(std::string_view json, uint64_t data_size, const std::string& where) {
  TANDEM_CHECK(!json.empty() && json.front() == '{', where, "the header is not a JSON object: it starts with ",
               in_quotes(json.substr(0, 16)));
  json::check_raw_json(json, where, kMaxNestingDepth);  // see Note [Depth before parsing]
  HeaderHandler handler(where);
  try {
    // Syntax errors reach handler.parse_error, which throws like every other method of the handler.
    nlohmann::json::sax_parse(json.begin(), json.end(), &handler);
  } catch (const nlohmann::json::exception& error) {  // anything nlohmann throws itself
    TANDEM_FAIL(where, "the header is not valid JSON: ", excerpt(error.what(), 200));
  }
  Header header = handler.take();
  check_layout(header.tensors, data_size, where);
  return header;
}

}  // namespace tandem::safetensors
