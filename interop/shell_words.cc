#include "interop/internal/shell_words.h"

#include "models/error.h"

namespace shardplan {

std::vector<std::string> shell_words(std::string_view text, const std::string& label) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  auto finish = [&] {
    if (in_word) words.push_back(word);
    word.clear();
    in_word = false;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\') {
      if (i + 1 < text.size() && text[i + 1] == '\n') {
        ++i;  // a continuation joins the lines
        continue;
      }
      if (i + 1 < text.size()) word += text[++i];
      in_word = true;
    } else if (c == '\'' || c == '"') {
      std::size_t close = i + 1;
      while (close < text.size() && text[close] != c) {
        if (c == '"' && text[close] == '\\' && close + 1 < text.size()) ++close;
        ++close;
      }
      if (close >= text.size()) {
        throw InputError(label, "", std::string("unclosed ") + c + " quote");
      }
      const std::string_view quoted = text.substr(i + 1, close - i - 1);
      if (c == '"') {
        // Inside double quotes a backslash escapes only $ ` " \ and newline.
        for (std::size_t k = 0; k < quoted.size(); ++k) {
          if (quoted[k] == '\\' && k + 1 < quoted.size() &&
              std::string_view("$`\"\\\n").find(quoted[k + 1]) != std::string_view::npos) {
            ++k;
          }
          word += quoted[k];
        }
      } else {
        word += quoted;
      }
      in_word = true;
      i = close;
    } else if (c == '#' && !in_word) {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ';') {
      finish();
    } else {
      word += c;
      in_word = true;
    }
  }
  finish();
  return words;
}

}  // namespace shardplan
