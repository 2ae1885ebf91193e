#include "interop/internal/arg_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "models/error.h"

namespace shardplan {
namespace {

// A value in a message: strings as typed, short lists of plain values as JSON, anything
// nested by its size (a list nested a million deep would recurse as deep to dump).
std::string shown(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object()) return fmt::format("an object of {} fields", value.size());
  if (value.is_array()) {
    const bool plain =
        value.size() <= 16 &&
        std::all_of(value.begin(), value.end(), [](const auto& v) { return v.is_primitive(); });
    if (!plain) return fmt::format("a list of {} items", value.size());
  }
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

const MegatronValue* ArgReader::find(const std::string& dest) const {
  const auto it = args_.values.find(dest);
  if (it == args_.values.end() || it->second.value.is_null()) return nullptr;
  return &it->second;
}

bool ArgReader::has(const std::string& dest) const {
  return find(dest) != nullptr;
}

bool ArgReader::is_list(const std::string& dest) const {
  const MegatronValue* v = find(dest);
  return v != nullptr && v->value.is_array();
}

std::string ArgReader::name(const std::string& dest) const {
  const auto it = args_.values.find(dest);
  return it != args_.values.end() ? it->second.name : megatron_flag_for(dest);
}

void ArgReader::fail(const std::string& dest, const std::string& reason) const {
  throw InputError(label_, name(dest), reason);
}

void ArgReader::not_modelled(const std::string& dest, const std::string& what) {
  used_.insert(dest);
  const MegatronValue* v = find(dest);
  notes_.push_back(v == nullptr ? fmt::format("{}: {}", name(dest), what)
                                : fmt::format("{} {}: {}", name(dest), shown(v->value), what));
}

std::optional<double> ArgReader::number(const std::string& dest) {
  const MegatronValue* v = find(dest);
  if (v == nullptr) return std::nullopt;
  used_.insert(dest);
  if (v->value.is_number()) return v->value.get<double>();
  const std::string text = shown(v->value);
  try {
    std::size_t used = 0;
    const double x = std::stod(text, &used);
    if (used == text.size() && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  fail(dest, fmt::format("expected a number, got '{}'{}", text,
                         text.rfind('$', 0) == 0 ? " (an unexpanded shell variable)" : ""));
}

std::optional<int64_t> ArgReader::integer(const std::string& dest) {
  const std::optional<double> x = number(dest);
  if (!x) return std::nullopt;
  if (*x != std::floor(*x) || std::abs(*x) > 9.0e15) {
    fail(dest, fmt::format("expected a whole number, got {}", shown(find(dest)->value)));
  }
  return static_cast<int64_t>(*x);
}

int64_t ArgReader::integer_or(const std::string& dest, int64_t fallback) {
  return integer(dest).value_or(fallback);
}

bool ArgReader::flag(const std::string& dest, bool fallback) {
  const MegatronValue* v = find(dest);
  if (v == nullptr) return fallback;
  used_.insert(dest);
  if (v->value.is_boolean()) return v->value.get<bool>();
  const std::string text = shown(v->value);
  if (text == "true" || text == "True" || text == "1") return true;
  if (text == "false" || text == "False" || text == "0") return false;
  fail(dest, fmt::format("expected true or false, got '{}'", text));
}

std::optional<std::string> ArgReader::text(const std::string& dest) {
  const MegatronValue* v = find(dest);
  if (v == nullptr) return std::nullopt;
  used_.insert(dest);
  if (v->value.is_array()) {
    if (v->value.size() != 1) fail(dest, "expected one value");
    return shown(v->value.front());
  }
  const std::string value = shown(v->value);
  if (value.rfind('$', 0) == 0)
    fail(dest, fmt::format("'{}' is an unexpanded shell variable", value));
  return value;
}

std::vector<std::string> ArgReader::texts(const std::string& dest) {
  const MegatronValue* v = find(dest);
  if (v == nullptr) return {};
  used_.insert(dest);
  std::vector<std::string> out;
  if (v->value.is_array()) {
    for (const auto& item : v->value) out.push_back(shown(item));
  } else {
    out.push_back(shown(v->value));
  }
  return out;
}

}  // namespace shardplan
