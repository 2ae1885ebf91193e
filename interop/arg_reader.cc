#include "interop/internal/arg_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "interop/internal/stack_text.h"
#include "models/error.h"

namespace shardplan {
namespace {

// A value a launch script left as written ($X the script never set, $(cmd), `cmd`).
bool unexpanded(std::string_view text) {
  return text.rfind('$', 0) == 0 || text.rfind('`', 0) == 0;
}

// A value in a message: strings as typed (cut and escaped when long or binary), short
// lists of plain values as JSON, anything nested by its size (a list nested a million
// deep would recurse as deep to dump).
std::string shown(const nlohmann::json& value) {
  if (value.is_string()) return shown_input(value.get<std::string>());
  if (value.is_object()) return fmt::format("an object of {} fields", value.size());
  if (value.is_array()) {
    const bool plain =
        value.size() <= 16 &&
        std::all_of(value.begin(), value.end(), [](const auto& v) { return v.is_primitive(); });
    if (!plain) return fmt::format("a list of {} items", value.size());
  }
  return shown_input(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// The same in quotes, as an error message shows what it could not read.
std::string quoted(const nlohmann::json& value) {
  return value.is_string() ? quote_input(value.get<std::string>()) : "'" + shown(value) + "'";
}

}  // namespace

const MegatronValue* ArgReader::find(const std::string& dest) const {
  asked_.insert(dest);
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
  const std::string text = v->value.is_string() ? v->value.get<std::string>() : shown(v->value);
  try {
    std::size_t used = 0;
    const double x = std::stod(text, &used);
    if (used == text.size() && std::isfinite(x)) return x;
  } catch (const std::exception&) {
  }
  fail(dest, fmt::format("expected a number, got {}{}", quoted(v->value),
                         unexpanded(text) ? " (a shell variable or command left unexpanded)" : ""));
}

std::optional<int64_t> ArgReader::integer(const std::string& dest) {
  const std::optional<double> x = number(dest);
  if (!x) return std::nullopt;
  if (*x != std::floor(*x) || std::abs(*x) > 9.0e15) {
    fail(dest, fmt::format("expected a whole number, got {}", quoted(find(dest)->value)));
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
  const std::string text = v->value.is_string() ? v->value.get<std::string>() : shown(v->value);
  if (text == "true" || text == "True" || text == "1") return true;
  if (text == "false" || text == "False" || text == "0") return false;
  fail(dest, fmt::format("expected true or false, got {}", quoted(v->value)));
}

std::optional<std::string> ArgReader::text(const std::string& dest) {
  const MegatronValue* v = find(dest);
  if (v == nullptr) return std::nullopt;
  used_.insert(dest);
  const nlohmann::json& item =
      v->value.is_array() && v->value.size() == 1 ? v->value.front() : v->value;
  if (item.is_array()) fail(dest, "expected one value");
  if (!item.is_string()) return item.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string value = item.get<std::string>();
  if (unexpanded(value)) {
    fail(dest, fmt::format("{} is a shell variable or command left unexpanded (shardplan "
                           "expands the variables a script sets, and runs nothing)",
                           quoted(item)));
  }
  return value;
}

std::vector<std::string> ArgReader::texts(const std::string& dest) {
  const MegatronValue* v = find(dest);
  if (v == nullptr) return {};
  used_.insert(dest);
  std::vector<std::string> out;
  const auto text = [](const nlohmann::json& item) {
    return item.is_string() ? item.get<std::string>()
                            : item.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (v->value.is_array()) {
    for (const auto& item : v->value) out.push_back(text(item));
  } else {
    out.push_back(text(v->value));
  }
  return out;
}

}  // namespace shardplan
