#pragma once

#include <stdexcept>
#include <string>

namespace shardplan {

// The one error type for bad input (files, fields, flags). Libraries throw it; the CLI
// catches it at its boundary, prints what() and exits non-zero. Infeasible results
// ("does not fit") are values, not errors.
class InputError : public std::runtime_error {
 public:
  // `file` is a path or a label such as "--set" or "<built-in llama3-8b>"; `field` is a
  // JSON path such as "/gpu/hbm_bytes" or a flag name. Either may be empty.
  InputError(std::string file, std::string field, std::string reason);

  const std::string& file() const { return file_; }
  const std::string& field() const { return field_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string file_;
  std::string field_;
  std::string reason_;
};

}  // namespace shardplan
