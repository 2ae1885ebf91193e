#pragma once

// The text of a training stack's config as its readers see it, and the input's names and
// values as notes show them.
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "interop/stack_job.h"

namespace shardplan {

// A --from-* file's text: read_text_file (its size limit; a directory or device refused),
// then stack_text.
std::string read_stack_file(const std::string& path);

// The text as the stack's own reader takes it: a UTF-8 byte-order mark at the start is
// dropped and CRLF line ends read as LF (editors on Windows write both). A NUL byte is an
// error: the file is binary, not a config. `label` names it in the error.
std::string stack_text(std::string text, const std::string& label);

// A name or value from the input inside a note: as typed when it is short and printable,
// else quoted, escaped and cut (quote_input), so a binary or multi-MB value cannot flood
// the terminal.
std::string shown_input(std::string_view text);

// The inputs' names a stack does not know, as the notes list them: each of the first
// kSuggested with its nearest known name (an edit distance over up to ~900 names each, so
// only those few pay for it), at most kListed in all, then a count of the rest.
class UnknownNames {
 public:
  static constexpr std::size_t kSuggested = 20;
  static constexpr std::size_t kListed = 100;

  // `shown` is the entry as listed ("[training] seed"); `nearest`, when wanted, computes
  // the suggestion already formatted ("[training] seeds").
  template <typename Nearest>
  void add(const std::string& shown, Nearest&& nearest) {
    ++count_;
    if (entries_.size() >= kListed) return;
    std::optional<std::string> near;
    if (count_ <= kSuggested) near = nearest();
    entries_.push_back(shown_input(shown) + (near ? " (did you mean " + *near + "?)" : ""));
  }
  void add(const std::string& shown) {
    add(shown, [] { return std::optional<std::string>(); });
  }
  std::size_t count() const { return count_; }
  // Appends the entries, and "... and N more" when some were not listed.
  void append_to(std::vector<std::string>& out) const;

 private:
  std::vector<std::string> entries_;
  std::size_t count_ = 0;
};

// Every note of the job printable (control bytes and invalid UTF-8 escaped, each cut) and
// each list at most UnknownNames::kListed long: notes are printed and written as JSON.
void tidy_stack_notes(StackJob& job);

}  // namespace shardplan
