#include "models/error.h"

#include <utility>

namespace shardplan {
namespace {

std::string format_message(const std::string& file, const std::string& field,
                           const std::string& reason) {
  std::string message;
  if (!file.empty()) message += file + ": ";
  if (!field.empty()) message += field + ": ";
  return message + reason;
}

}  // namespace

InputError::InputError(std::string file, std::string field, std::string reason)
    : std::runtime_error(format_message(file, field, reason)),
      file_(std::move(file)),
      field_(std::move(field)),
      reason_(std::move(reason)) {}

}  // namespace shardplan
