#include "models/json_reader.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "models/error.h"
#include "models/suggest.h"

namespace shardplan {
namespace {

std::string type_name(const nlohmann::json& value) {
  return std::string(value.type_name());
}

// A value as it appears in an error: its JSON, cut short so a large array or a long
// string keeps the message to one readable line.
std::string brief(const nlohmann::json& value) {
  // Arrays and objects by their size: dumping one nested a million deep would recurse as
  // deep.
  if (value.is_array()) return fmt::format("an array of {} items", value.size());
  if (value.is_object()) return fmt::format("an object of {} fields", value.size());
  constexpr std::size_t kMaxChars = 60;
  // Invalid UTF-8 (a --set value is any bytes) is shown replaced, not thrown.
  std::string text =
      value.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

// Line and column (1-based) of a byte offset, for syntax errors.
std::pair<std::size_t, std::size_t> line_and_column(std::string_view text, std::size_t byte) {
  std::size_t line = 1;
  std::size_t column = 1;
  for (std::size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& label) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& error) {
    // nlohmann reports the byte just past the offending token.
    const std::size_t byte = error.byte > 0 ? error.byte - 1 : 0;
    const auto [line, column] = line_and_column(text, byte);
    // what() reads "[json.exception.parse_error.101] parse error at line L, column C:
    // <reason>"; keep the reason, which may itself contain ": ".
    std::string reason = error.what();
    if (const auto at = reason.find("parse error"); at != std::string::npos) {
      if (const auto colon = reason.find(": ", at); colon != std::string::npos) {
        reason = reason.substr(colon + 2);
      }
    }
    throw InputError(label, "",
                     fmt::format("invalid JSON at line {}, column {}: {}", line, column, reason));
  } catch (const nlohmann::json::exception& error) {
    // A number past the double range ("1e999") is out_of_range.406, with no position.
    std::string reason = error.what();
    if (const auto bracket = reason.find("] "); bracket != std::string::npos)
      reason = reason.substr(bracket + 2);
    throw InputError(label, "", "invalid JSON: " + reason);
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open file");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_json_text(read_text_file(path), path);
}

std::optional<std::string> out_of_range_reason(int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return std::nullopt;
  if (value < lo && lo == 1) return fmt::format("must be positive, got {}", value);
  if (value < lo && lo == 0) return fmt::format("must not be negative, got {}", value);
  return fmt::format("must be in [{}, {}], got {}", lo, hi, value);
}

JsonReader::JsonReader(const nlohmann::json& value, std::string file, std::string path)
    : value_(&value), file_(std::move(file)), path_(std::move(path)) {
  if (!value.is_object()) {
    throw InputError(file_, path_.empty() ? "/" : path_,
                     "expected a JSON object, got " + type_name(value));
  }
}

std::string JsonReader::path_of(std::string_view key) const {
  return path_ + "/" + std::string(key);
}

void JsonReader::fail(std::string_view key, const std::string& reason) const {
  throw InputError(file_, key.empty() ? path_ : path_of(key), reason);
}

bool JsonReader::has(std::string_view key) const {
  return value_->contains(key) && !value_->at(std::string(key)).is_null();
}

const nlohmann::json& JsonReader::value(std::string_view key) const {
  if (!has(key)) fail(key, "required field is missing");
  return value_->at(std::string(key));
}

int64_t JsonReader::integer(std::string_view key) const {
  const nlohmann::json& v = value(key);
  // nlohmann keeps integers above INT64_MAX as unsigned; a float converts only when it is
  // whole and inside int64 (converting one outside is undefined behaviour).
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) return v.get<int64_t>();
    fail(key, "exceeds the largest integer, 2^63 - 1, got " + brief(v));
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    constexpr double kTwo63 = 9223372036854775808.0;
    if (d >= -kTwo63 && d < kTwo63 && d == std::trunc(d)) return static_cast<int64_t>(d);
  }
  fail(key, "expected an integer, got " + brief(v));
}

int64_t JsonReader::integer_in(std::string_view key, int64_t lo, int64_t hi) const {
  const int64_t v = integer(key);
  if (auto reason = out_of_range_reason(v, lo, hi)) fail(key, *reason);
  return v;
}

int64_t JsonReader::integer_in_or(std::string_view key, int64_t lo, int64_t hi,
                                  int64_t fallback) const {
  return has(key) ? integer_in(key, lo, hi) : fallback;
}

int64_t JsonReader::integer_or(std::string_view key, int64_t fallback) const {
  return has(key) ? integer(key) : fallback;
}

int64_t JsonReader::positive_integer(std::string_view key) const {
  const int64_t v = integer(key);
  if (v <= 0) fail(key, fmt::format("must be positive, got {}", v));
  return v;
}

int64_t JsonReader::positive_integer_or(std::string_view key, int64_t fallback) const {
  return has(key) ? positive_integer(key) : fallback;
}

double JsonReader::number(std::string_view key) const {
  const nlohmann::json& v = value(key);
  if (!v.is_number()) fail(key, "expected a number, got " + brief(v));
  const double d = v.get<double>();
  // JSON has no infinities, but a literal past the double range (1e999) reads as one.
  if (!std::isfinite(d)) fail(key, "expected a finite number, got " + brief(v));
  return d;
}

double JsonReader::number_or(std::string_view key, double fallback) const {
  return has(key) ? number(key) : fallback;
}

double JsonReader::number_in(std::string_view key, double lo, double hi) const {
  const double v = number(key);
  if (!(v >= lo && v <= hi)) fail(key, fmt::format("must be in [{:g}, {:g}], got {:g}", lo, hi, v));
  return v;
}

double JsonReader::non_negative_number(std::string_view key) const {
  const double v = number(key);
  if (!(v >= 0)) fail(key, fmt::format("must not be negative, got {}", v));
  return v;
}

bool JsonReader::boolean(std::string_view key) const {
  const nlohmann::json& v = value(key);
  if (!v.is_boolean()) fail(key, "expected true or false, got " + brief(v));
  return v.get<bool>();
}

bool JsonReader::boolean_or(std::string_view key, bool fallback) const {
  return has(key) ? boolean(key) : fallback;
}

std::string JsonReader::string(std::string_view key) const {
  const nlohmann::json& v = value(key);
  if (!v.is_string()) fail(key, "expected a string, got " + brief(v));
  return v.get<std::string>();
}

std::string JsonReader::string_or(std::string_view key, std::string fallback) const {
  return has(key) ? string(key) : fallback;
}

std::vector<std::string> JsonReader::strings(std::string_view key) const {
  const nlohmann::json& v = value(key);
  if (!v.is_array()) fail(key, "expected an array of strings, got " + brief(v));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      throw InputError(file_, path_of(key) + "/" + std::to_string(i),
                       "expected a string, got " + brief(v[i]));
    }
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

std::vector<int64_t> JsonReader::integers(std::string_view key) const {
  const nlohmann::json& v = value(key);
  if (!v.is_array()) fail(key, "expected an array of integers, got " + brief(v));
  std::vector<int64_t> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer() ||
        (v[i].is_number_unsigned() && v[i].get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
      throw InputError(file_, path_of(key) + "/" + std::to_string(i),
                       "expected an integer up to 2^63 - 1, got " + brief(v[i]));
    }
    out.push_back(v[i].get<int64_t>());
  }
  return out;
}

JsonReader JsonReader::object(std::string_view key) const {
  return JsonReader(value(key), file_, path_of(key));
}

std::vector<JsonReader> JsonReader::objects(std::string_view key) const {
  const nlohmann::json& v = value(key);
  if (!v.is_array()) fail(key, "expected an array of objects, got " + type_name(v));
  std::vector<JsonReader> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    out.emplace_back(v[i], file_, path_of(key) + "/" + std::to_string(i));
  }
  return out;
}

void JsonReader::expect_only(std::initializer_list<std::string_view> known) const {
  expect_only(std::vector<std::string>(known.begin(), known.end()));
}

void JsonReader::expect_only(const std::vector<std::string>& known) const {
  for (const auto& [key, unused] : value_->items()) {
    bool found = false;
    for (const std::string& name : known) found = found || name == key;
    if (!found) fail(key, unknown_name_message("field", key, known));
  }
}

}  // namespace shardplan
