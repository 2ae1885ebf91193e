#include "models/model_spec.h"

namespace shardplan {

int64_t Parameter::numel() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

void for_each_module(const Module& root, const std::function<void(const Module&)>& visit) {
  visit(root);
  for (const Module& child : root.children) for_each_module(child, visit);
}

int64_t parameter_count(const Module& module) {
  int64_t count = 0;
  for_each_module(module, [&](const Module& m) {
    for (const Parameter& p : m.parameters) count += p.numel();
  });
  return count;
}

std::optional<int64_t> parameter_count_within(const Module& module, int64_t limit) {
  int64_t count = 0;
  bool over = false;
  for_each_module(module, [&](const Module& m) {
    for (const Parameter& p : m.parameters) {
      int64_t numel = 1;
      for (int64_t dim : p.shape) over = over || __builtin_mul_overflow(numel, dim, &numel);
      over = over || __builtin_add_overflow(count, numel, &count) || count > limit;
      if (over) return;
    }
  });
  if (over) return std::nullopt;
  return count;
}

int64_t trainable_parameter_count(const Module& module) {
  int64_t count = 0;
  for_each_module(module, [&](const Module& m) {
    for (const Parameter& p : m.parameters) count += p.requires_grad ? p.numel() : 0;
  });
  return count;
}

namespace {

double active_count(const Module& module, double parent_fraction) {
  // A module inherits its parent's token share unless it states its own.
  const double fraction =
      module.cost.token_fraction != 1.0 ? module.cost.token_fraction : parent_fraction;
  double count = 0;
  for (const Parameter& p : module.parameters) {
    count +=
        static_cast<double>(p.numel()) * fraction / static_cast<double>(module.stacked_experts);
  }
  for (const Module& child : module.children) count += active_count(child, fraction);
  return count;
}

}  // namespace

double active_parameter_count(const Module& module) {
  return active_count(module, 1.0);
}

const Module* find_module(const Module& root, const std::string& name) {
  if (root.name == name) return &root;
  for (const Module& child : root.children) {
    if (const Module* found = find_module(child, name)) return found;
  }
  return nullptr;
}

}  // namespace shardplan
