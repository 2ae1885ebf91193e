#include "models/json_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "models/error.h"
#include "models/json_containers.h"
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

// Builds the document as nlohmann's own DOM parser does, and refuses a key an object
// already has and nesting past kMaxJsonDepth (JsonContainers).
class DuplicateKeyCheck final : public nlohmann::json_sax<nlohmann::json> {
 public:
  DuplicateKeyCheck(nlohmann::json& result, const std::string& label)
      : dom_(result, /*allow_exceptions=*/true), label_(label) {}

  bool null() override { return element() && dom_.null(); }
  bool boolean(bool value) override { return element() && dom_.boolean(value); }
  bool number_integer(number_integer_t value) override {
    return element() && dom_.number_integer(value);
  }
  bool number_unsigned(number_unsigned_t value) override {
    return element() && dom_.number_unsigned(value);
  }
  bool number_float(number_float_t value, const string_t& text) override {
    return element() && dom_.number_float(value, text);
  }
  bool string(string_t& value) override { return element() && dom_.string(value); }
  bool binary(binary_t& value) override { return element() && dom_.binary(value); }
  bool start_object(std::size_t size) override {
    open(/*object=*/true);
    return dom_.start_object(size);
  }
  bool key(string_t& name) override {
    if (!containers_.add_key(name)) {
      const std::string path = containers_.path();
      throw InputError(
          label_, path.empty() ? "/" : path,
          "the key " + quote_input(name) + " appears twice in this object; give each key once");
    }
    return dom_.key(name);
  }
  bool end_object() override {
    containers_.close();
    return dom_.end_object();
  }
  bool start_array(std::size_t size) override {
    open(/*object=*/false);
    return dom_.start_array(size);
  }
  bool end_array() override {
    containers_.close();
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& error) override {
    // Thrown as its own type: rethrowing the base reference would lose the byte offset
    // parse_json_text turns into a line and column.
    if (const auto* syntax = dynamic_cast<const nlohmann::json::parse_error*>(&error))
      throw *syntax;
    if (const auto* range = dynamic_cast<const nlohmann::json::out_of_range*>(&error)) throw *range;
    return dom_.parse_error(position, last_token, error);
  }

 private:
  bool element() {
    containers_.value();
    return true;
  }
  void open(bool object) {
    if (!containers_.open(object)) {
      throw InputError(label_, "",
                       fmt::format("values nested more than {} levels deep; no shardplan input "
                                   "nests that deep (copying such a value would recurse as deep)",
                                   kMaxJsonDepth));
    }
  }

  nlohmann::detail::json_sax_dom_parser<nlohmann::json> dom_;
  const std::string& label_;
  JsonContainers containers_;
};

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& label) {
  try {
    nlohmann::json result;
    DuplicateKeyCheck checked(result, label);
    nlohmann::json::sax_parse(text.begin(), text.end(), &checked);
    return result;
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
    // "...; last read: '<the text it read>'; ..." echoes the input (a whole long token):
    // the line and column say where, without it.
    if (const auto last = reason.find("; last read: '"); last != std::string::npos) {
      const auto end = reason.find("'; ", last + 14);
      reason.erase(last, end == std::string::npos ? std::string::npos : end + 1 - last);
    }
    throw InputError(label, "",
                     fmt::format("invalid JSON at line {}, column {}: {}", line, column, reason));
  } catch (const nlohmann::json::exception& error) {
    // A number past the double range ("1e999") is out_of_range.406, with no position.
    std::string reason = error.what();
    if (const auto bracket = reason.find("] "); bracket != std::string::npos)
      reason = reason.substr(bracket + 2);
    // "number overflow parsing '<token>'": the token may be megabytes of digits.
    constexpr std::string_view kOverflow = "number overflow parsing '";
    if (reason.starts_with(kOverflow) && reason.ends_with("'")) {
      const std::string token =
          reason.substr(kOverflow.size(), reason.size() - kOverflow.size() - 1);
      reason = "a number past the range of a double: " + quote_input(token);
    }
    throw InputError(label, "", "invalid JSON: " + reason);
  }
}

std::string json_text(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

std::string read_text_file(const std::string& path, int64_t max_bytes) {
  // open() and fstat() rather than ifstream: a directory opens as an empty stream, and a
  // device or FIFO has no size to check before reading it.
  if (path.empty()) throw InputError("''", "", "an empty path names no file; give one");
  // O_NONBLOCK: opening a FIFO no process writes to would wait forever; once open, reads
  // block again (a FIFO with no writer then reads as empty).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    throw InputError(path, "", std::string("cannot open file: ") + std::strerror(error));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    throw InputError(path, "", std::string("cannot read file: ") + std::strerror(errno));
  }
  if (S_ISDIR(info.st_mode)) throw InputError(path, "", "is a directory, not a file");
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const auto too_large = [&](const std::string& size) {
    return InputError(path, "",
                      fmt::format("{} is larger than the {} MiB an input file may have "
                                  "(docs/formats.md, Limits)",
                                  size, max_bytes >> 20));
  };
  if (S_ISREG(info.st_mode) && info.st_size > max_bytes) {
    throw too_large(fmt::format("the file ({} bytes)", info.st_size));
  }
  // Devices, FIFOs and files that grow while read: read in blocks and stop one byte past
  // the limit, so /dev/zero ends at once with the limit named, not in bad_alloc.
  std::string text;
  if (S_ISREG(info.st_mode)) text.reserve(static_cast<std::size_t>(info.st_size));
  std::array<char, 1 << 16> block{};
  for (;;) {
    const ssize_t got = ::read(fd, block.data(), block.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      throw InputError(path, "", std::string("cannot read file: ") + std::strerror(errno));
    }
    if (got == 0) break;
    text.append(block.data(), static_cast<std::size_t>(got));
    if (static_cast<int64_t>(text.size()) > max_bytes) throw too_large("the input");
  }
  return text;
}

nlohmann::json read_json_file(const std::string& path, int64_t max_bytes) {
  return parse_json_text(read_text_file(path, max_bytes), path);
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
