#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/limits.h"

namespace shardplan {

// A whole file as text. A missing or unreadable file, a directory, or one larger than
// `max_bytes` (a device such as /dev/zero included: it is read only that far) is an
// InputError naming it.
std::string read_text_file(const std::string& path, int64_t max_bytes = limits::kMaxInputFileBytes);
// Reads a JSON file of at most `max_bytes`; a missing file or a syntax error becomes an
// InputError naming the file and the line and column.
nlohmann::json read_json_file(const std::string& path,
                              int64_t max_bytes = limits::kMaxInputFileBytes);
// JSON text of `value` for output (stdout, plan.json, timelines): `indent` as dump's. Text
// that is not UTF-8 (a file name from the command line may be any bytes) is written with
// U+FFFD in its place, where dump() would throw.
std::string json_text(const nlohmann::json& value, int indent = -1);
// Parses JSON text that came from `label` (a file name or "<built-in x>").
nlohmann::json parse_json_text(std::string_view text, const std::string& label);

// Why `value` is outside [lo, hi], as the end of an error message ("must be positive,
// got 0", "must be in [1, 1048576], got 2000000"); nullopt when inside. One wording for
// every range check, in files and flags alike.
std::optional<std::string> out_of_range_reason(int64_t value, int64_t lo, int64_t hi);

// A typed view of one JSON object that knows which file and JSON path it came from, so
// every error names both ("cluster.json: /gpu/hbm_bytes: must be positive, got -1").
class JsonReader {
 public:
  // Throws InputError unless `value` is an object.
  JsonReader(const nlohmann::json& value, std::string file, std::string path = "");

  bool has(std::string_view key) const;
  const nlohmann::json& value(std::string_view key) const;  // required key

  int64_t integer(std::string_view key) const;
  int64_t integer_or(std::string_view key, int64_t fallback) const;
  int64_t positive_integer(std::string_view key) const;
  int64_t positive_integer_or(std::string_view key, int64_t fallback) const;
  // Range-checked: outside [lo, hi] is an error naming the range.
  int64_t integer_in(std::string_view key, int64_t lo, int64_t hi) const;
  int64_t integer_in_or(std::string_view key, int64_t lo, int64_t hi, int64_t fallback) const;
  double number(std::string_view key) const;  // finite
  double number_or(std::string_view key, double fallback) const;
  double number_in(std::string_view key, double lo, double hi) const;
  double non_negative_number(std::string_view key) const;
  bool boolean(std::string_view key) const;
  bool boolean_or(std::string_view key, bool fallback) const;
  std::string string(std::string_view key) const;
  std::string string_or(std::string_view key, std::string fallback) const;
  std::vector<std::string> strings(std::string_view key) const;
  std::vector<int64_t> integers(std::string_view key) const;
  JsonReader object(std::string_view key) const;
  std::vector<JsonReader> objects(std::string_view key) const;  // an array of objects

  // Rejects any key not in `known`, naming the nearest valid key.
  void expect_only(std::initializer_list<std::string_view> known) const;
  void expect_only(const std::vector<std::string>& known) const;

  [[noreturn]] void fail(std::string_view key, const std::string& reason) const;
  std::string path_of(std::string_view key) const;
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  const nlohmann::json& json() const { return *value_; }

 private:
  const nlohmann::json* value_;
  std::string file_;
  std::string path_;
};

}  // namespace shardplan
