#include "models/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
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

// A path or field may itself come from the input (a key of a JSON object, a file name of
// thousands of bytes), so each part is bounded on its own, the names by their two ends
// (where a path says which file, and which field it ends in); the whole message then stays
// under about 1 200 bytes.
constexpr std::size_t kMaxNameBytes = 200;
constexpr std::size_t kMaxReasonBytes = 800;

// The length of the UTF-8 sequence starting at text[at] if it is well formed (shortest
// form, no surrogates, at most U+10FFFF), else 0.
std::size_t utf8_sequence_length(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(at);
  std::size_t length = 0;
  uint32_t code = 0;
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    code = lead & 0x1Fu;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code = lead & 0x0Fu;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code = lead & 0x07u;
  } else {
    return 0;
  }
  if (at + length > text.size()) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(at + i) & 0xC0u) != 0x80u) return 0;
    code = (code << 6) | (byte(at + i) & 0x3Fu);
  }
  const bool overlong = (length == 3 && code < 0x800) || (length == 4 && code < 0x10000);
  const bool surrogate = code >= 0xD800 && code <= 0xDFFF;
  if (overlong || surrogate || code > 0x10FFFF) return 0;
  return length;
}

// Appends the escaped form of the character at text[at] and returns how many bytes it
// took. Newlines are kept only when `keep_newlines` (a message may have several lines; a
// quoted value may not).
std::size_t append_escaped(std::string& out, std::string_view text, std::size_t at,
                           bool keep_newlines) {
  const unsigned char c = static_cast<unsigned char>(text[at]);
  if (c == '\n') {
    out += keep_newlines ? "\n" : "\\n";
    return 1;
  }
  if (c == '\r') {
    out += "\\r";
    return 1;
  }
  if (c == '\t') {
    out += keep_newlines ? "\t" : "\\t";
    return 1;
  }
  if (c < 0x20 || c == 0x7F) {
    out += fmt::format("\\x{:02X}", c);
    return 1;
  }
  const std::size_t length = utf8_sequence_length(text, at);
  if (length == 0) {
    out += fmt::format("\\x{:02X}", c);
    return 1;
  }
  const std::string_view sequence = text.substr(at, length);
  const auto second = static_cast<unsigned char>(length == 2 ? sequence[1] : 0);
  if (sequence == "\xEF\xBB\xBF") {  // U+FEFF, the byte-order mark: invisible when printed
    out += "\\u{FEFF}";
  } else if (c == 0xC2 && second >= 0x80 && second <= 0x9F) {
    // U+0080-U+009F, the C1 controls: valid UTF-8, but a terminal acts on some of them.
    out += fmt::format("\\u{{{:04X}}}", second);
  } else {
    out += sequence;
  }
  return length;
}

std::string size_note(std::size_t bytes) {
  if (bytes < 10'000) return fmt::format("{} bytes", bytes);
  if (bytes < 1'000'000) return fmt::format("{:.1f} kB", static_cast<double>(bytes) / 1e3);
  return fmt::format("{:.1f} MB", static_cast<double>(bytes) / 1e6);
}

}  // namespace

InputError::InputError(std::string file, std::string field, std::string reason)
    : InputError(Parts{printable_name(file, kMaxNameBytes), printable_name(field, kMaxNameBytes),
                       printable_message(reason, kMaxReasonBytes)}) {}

InputError::InputError(Parts parts)
    : std::runtime_error(format_message(parts.file, parts.field, parts.reason)),
      file_(std::move(parts.file)),
      field_(std::move(parts.field)),
      reason_(std::move(parts.reason)) {}

std::string quote_input(std::string_view value, std::size_t max_chars) {
  std::string out = "'";
  std::size_t at = 0;
  std::size_t chars = 0;
  while (at < value.size() && chars < max_chars) {
    at += append_escaped(out, value, at, /*keep_newlines=*/false);
    ++chars;
  }
  out += "'";
  if (at < value.size()) {
    out.insert(out.size() - 1, "…");
    out += " (" + size_note(value.size()) + ")";
  }
  return out;
}

std::string printable_message(std::string_view text, std::size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 16);
  std::size_t at = 0;
  while (at < text.size() && out.size() < max_bytes) {
    at += append_escaped(out, text, at, /*keep_newlines=*/true);
  }
  if (at < text.size()) {
    out += fmt::format(" … ({} more left out)", size_note(text.size() - at));
  }
  return out;
}

std::string printable_name(std::string_view text, std::size_t max_bytes) {
  std::string whole;
  std::size_t at = 0;
  while (at < text.size() && whole.size() <= max_bytes) {
    at += append_escaped(whole, text, at, /*keep_newlines=*/false);
  }
  if (at == text.size() && whole.size() <= max_bytes) return whole;
  // The two ends, each cut at a character: the head from the escaped text, the tail escaped
  // from the input's last bytes (skipping a partial UTF-8 sequence at its start).
  std::size_t head_end = max_bytes / 2;
  while (head_end > 0 && (static_cast<unsigned char>(whole[head_end]) & 0xC0u) == 0x80u) --head_end;
  std::size_t tail_start = text.size() > max_bytes / 2 ? text.size() - max_bytes / 2 : 0;
  while (tail_start < text.size() &&
         (static_cast<unsigned char>(text[tail_start]) & 0xC0u) == 0x80u) {
    ++tail_start;
  }
  std::string tail;
  for (std::size_t i = tail_start; i < text.size();) {
    i += append_escaped(tail, text, i, /*keep_newlines=*/false);
  }
  return whole.substr(0, head_end) + fmt::format("…({} in all)…", size_note(text.size())) + tail;
}

}  // namespace shardplan
