#include "interop/internal/stack_text.h"

#include <fmt/format.h>

#include <algorithm>

#include "models/error.h"
#include "models/json_reader.h"
#include "models/suggest.h"

namespace shardplan {
namespace {

// A note longer than this is cut: a few names and values fit, a pasted file does not.
constexpr std::size_t kMaxNoteBytes = 400;

bool printable_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x7F;
  });
}

}  // namespace

std::string read_stack_file(const std::string& path) {
  return stack_text(read_text_file(path), path);
}

std::string stack_text(std::string text, const std::string& label) {
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);
  if (const std::size_t nul = text.find('\0'); nul != std::string::npos) {
    throw InputError(label, "",
                     fmt::format("holds a NUL byte (at byte {}): a binary file, not a training "
                                 "stack's config",
                                 nul));
  }
  std::size_t out = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    text[out++] = text[i];
  }
  text.resize(out);
  return text;
}

std::string shown_input(std::string_view text) {
  constexpr std::size_t kShown = 60;
  if (text.size() <= kShown && printable_ascii(text)) return std::string(text);
  return quote_input(text, kShown);
}

void UnknownNames::append_to(std::vector<std::string>& out) const {
  out.insert(out.end(), entries_.begin(), entries_.end());
  if (count_ > entries_.size())
    out.push_back(fmt::format("... and {} more", count_ - entries_.size()));
}

void tidy_stack_notes(StackJob& job) {
  for (std::vector<std::string>* list : {&job.ignored, &job.not_modelled, &job.unknown}) {
    const std::size_t total = list->size();
    if (total > UnknownNames::kListed + 1) list->resize(UnknownNames::kListed);
    for (std::string& note : *list) note = printable_message(note, kMaxNoteBytes);
    if (total > list->size()) list->push_back(fmt::format("... and {} more", total - list->size()));
  }
}

}  // namespace shardplan
