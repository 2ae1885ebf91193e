#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace shardplan {

// The one error type for bad input (files, fields, flags). Libraries throw it; the CLI
// catches it at its boundary, prints what() and exits non-zero. Infeasible results
// ("does not fit") are values, not errors.
class InputError : public std::runtime_error {
 public:
  // `file` is a path or a label such as "--set" or "<built-in llama3-8b>"; `field` is a
  // JSON path such as "/gpu/hbm_bytes" or a flag name. Either may be empty. Each part is
  // kept as printable_message makes it (and what() is built from them), so a value echoed
  // from a binary or huge input cannot garble or flood the user's terminal.
  InputError(std::string file, std::string field, std::string reason);

  const std::string& file() const { return file_; }
  const std::string& field() const { return field_; }
  const std::string& reason() const { return reason_; }

 private:
  struct Parts {
    std::string file, field, reason;
  };
  explicit InputError(Parts parts);

  std::string file_;
  std::string field_;
  std::string reason_;
};

// A value taken from the user's input, ready to sit inside a message: in single quotes,
// with control bytes, invalid UTF-8 and invisible marks (a byte-order mark) written as
// \xNN / \r / \t / \n / \u{FEFF}, and cut after `max_chars` characters with the length
// of the whole ("'GPT_ARGS=--num-…' (2.1 MB)").
std::string quote_input(std::string_view value, std::size_t max_chars = 60);

// `text` with the same escapes as quote_input but no quotes, newlines kept, and cut to
// `max_bytes` with a note of how much was left out. The safety net InputError applies to
// every message.
std::string printable_message(std::string_view text, std::size_t max_bytes = 4096);

// A file name or JSON path for a message: escaped as quote_input does (newlines too), and
// when longer than `max_bytes`, its two ends with the length of the whole between them
// ("/ops/35/bytttt…(4.0 kB in all)…ttes").
std::string printable_name(std::string_view text, std::size_t max_bytes = 200);

}  // namespace shardplan
