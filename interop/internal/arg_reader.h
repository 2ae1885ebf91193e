#pragma once

// Typed, consumption-tracking access to Megatron's arguments, so that every argument the
// interpretation did not use can be listed (ignored / not modelled) rather than dropped.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "interop/internal/megatron.h"

namespace shardplan {

class ArgReader {
 public:
  ArgReader(const MegatronArgs& args, std::string label) : args_(args), label_(std::move(label)) {}

  // Set and not null (a Bridge field may be None).
  bool has(const std::string& dest) const;
  bool is_list(const std::string& dest) const;
  // The name the input used, or Megatron's flag when absent.
  std::string name(const std::string& dest) const;
  std::optional<int64_t> integer(const std::string& dest);
  int64_t integer_or(const std::string& dest, int64_t fallback);
  std::optional<double> number(const std::string& dest);
  bool flag(const std::string& dest, bool fallback = false);
  std::optional<std::string> text(const std::string& dest);
  std::vector<std::string> texts(const std::string& dest);  // nargs '+': one or more words
  // Marks an argument read without using its value (it only confirms a default).
  void use(const std::string& dest) { used_.insert(dest); }

  [[noreturn]] void fail(const std::string& dest, const std::string& reason) const;
  // "--fp8-recipe tensorwise: modelled as delayed scaling (...)"
  void not_modelled(const std::string& dest, const std::string& what);

  const std::string& label() const { return label_; }
  const std::set<std::string>& used() const { return used_; }
  // Every argument the reading asked for, given or not.
  const std::set<std::string>& asked() const { return asked_; }
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  const MegatronValue* find(const std::string& dest) const;

  const MegatronArgs& args_;
  std::string label_;
  std::set<std::string> used_;
  mutable std::set<std::string> asked_;
  std::vector<std::string> notes_;
};

}  // namespace shardplan
