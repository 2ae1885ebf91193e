#include "pool/csv.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <unordered_set>

#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"

namespace shardplan {
namespace {

std::vector<std::string> split(std::string_view line) {
  std::vector<std::string> fields;
  std::size_t start = 0;
  while (true) {
    const auto comma = line.find(',', start);
    std::string field(line.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    // Tolerate spaces around fields and a CR from CRLF files.
    while (!field.empty() && (field.back() == ' ' || field.back() == '\r')) field.pop_back();
    while (!field.empty() && field.front() == ' ') field.erase(field.begin());
    fields.push_back(std::move(field));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return fields;
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// `rest`: the text after the blank line `blank_line`.
void refuse_rows_after_blank(std::string_view rest, std::size_t blank_line,
                             const std::string& label) {
  std::size_t first = 0, last = 0, rows = 0;
  std::size_t line_number = blank_line;
  for (std::size_t pos = 0; pos < rest.size();) {
    const auto newline = rest.find('\n', pos);
    const std::string_view line = rest.substr(
        pos, newline == std::string_view::npos ? std::string_view::npos : newline - pos);
    pos = newline == std::string_view::npos ? rest.size() : newline + 1;
    ++line_number;
    if (is_blank(line)) continue;
    if (rows++ == 0) first = line_number;
    last = line_number;
  }
  if (rows == 0) return;
  throw InputError(label, fmt::format("line {}", blank_line),
                   fmt::format("empty line before {} more {} ({}): MiniMalloc stops reading at "
                               "the first empty line, so {} would be ignored; remove the empty "
                               "line (or the rows after it)",
                               rows, rows == 1 ? "row" : "rows",
                               first == last ? fmt::format("line {}", first)
                                             : fmt::format("lines {}-{}", first, last),
                               rows == 1 ? "it" : "they"));
}

}  // namespace

PoolTable parse_pool_csv(std::string_view text, const std::string& label) {
  PoolTable table;
  std::size_t line_number = 0;
  std::size_t pos = 0;
  int id_col = -1, lower_col = -1, upper_col = -1, size_col = -1, alignment_col = -1,
      offset_col = -1;
  bool inclusive_end = false;
  std::unordered_set<std::string> ids;
  int64_t total_bytes = 0;
  while (pos <= text.size()) {
    const auto newline = text.find('\n', pos);
    std::string_view line = text.substr(
        pos, newline == std::string_view::npos ? std::string_view::npos : newline - pos);
    pos = newline == std::string_view::npos ? text.size() + 1 : newline + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const auto where = [&](const std::string& column) {
      return fmt::format("line {}{}", line_number, column.empty() ? "" : ", column " + column);
    };
    if (line_number == 1) {
      if (line.empty())
        throw InputError(label, "line 1", "empty file: expected the header id,lower,upper,size");
      const auto columns = split(line);
      for (std::size_t c = 0; c < columns.size(); ++c) {
        const std::string& name = columns[c];
        const int col = static_cast<int>(c);
        if (name == "id" || name == "buffer" || name == "buffer_id") {
          id_col = col;
        } else if (name == "lower" || name == "start" || name == "begin") {
          lower_col = col;
        } else if (name == "upper") {
          upper_col = col;
        } else if (name == "end") {
          upper_col = col;
          inclusive_end = true;
        } else if (name == "size") {
          size_col = col;
        } else if (name == "alignment") {
          alignment_col = col;
        } else if (name == "offset") {
          offset_col = col;
        } else if (name == "hint") {
          // MiniMalloc's placement hint (-1: none): read and kept, not used.
        } else {
          throw InputError(label, where(name),
                           "unknown column (expected id, lower, upper, size, and optionally "
                           "alignment, offset, hint)");
        }
      }
      for (const auto& [col, name] : {std::pair{id_col, "id"}, std::pair{lower_col, "lower"},
                                      std::pair{upper_col, "upper"}, std::pair{size_col, "size"}}) {
        if (col < 0) throw InputError(label, "line 1", fmt::format("missing column '{}'", name));
      }
      for (std::size_t c = 0; c < columns.size(); ++c) {
        if (static_cast<int>(c) != offset_col) table.header.push_back(columns[c]);
      }
      continue;
    }
    if (is_blank(line)) {
      // MiniMalloc stops at the first empty line: rows after one would be dropped without
      // a word, and a pool packed without them is too small for the program. Blank lines
      // at the very end are harmless; rows after a blank line are an error.
      if (pos < text.size()) refuse_rows_after_blank(text.substr(pos), line_number, label);
      break;
    }
    auto fields = split(line);
    if (fields.size() != table.header.size() + (offset_col >= 0 ? 1 : 0)) {
      throw InputError(label, where(""),
                       fmt::format("{} fields, the header has {}", fields.size(),
                                   table.header.size() + (offset_col >= 0 ? 1 : 0)));
    }
    auto integer = [&](int col, const char* name) {
      const std::string& field = fields[static_cast<std::size_t>(col)];
      int64_t value = 0;
      const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
      if (error != std::errc() || end != field.data() + field.size() || field.empty()) {
        throw InputError(label, where(name),
                         fmt::format("expected an integer, got {}", quote_input(field)));
      }
      return value;
    };
    auto in_range = [&](int col, const char* name, int64_t lo, int64_t hi) {
      const int64_t value = integer(col, name);
      if (auto reason = out_of_range_reason(value, lo, hi))
        throw InputError(label, where(name), *reason);
      return value;
    };
    // Bounds that keep every offset, end and stack of aligned buffers inside int64: half
    // the pool limit for the sizes, the rest for the alignment each buffer may add.
    constexpr int64_t kMaxTotalBytes = limits::kMaxPoolBytes / 2;
    PoolRequest r;
    r.begin = in_range(lower_col, "lower", 0, limits::kMaxPoolTime - 1);
    r.end = inclusive_end ? in_range(upper_col, "end", 0, limits::kMaxPoolTime - 1) + 1
                          : in_range(upper_col, "upper", 0, limits::kMaxPoolTime);
    r.bytes = in_range(size_col, "size", 1, kMaxTotalBytes);
    if (alignment_col >= 0)
      r.alignment = in_range(alignment_col, "alignment", 1, limits::kMaxAlignmentBytes);
    if (offset_col >= 0) integer(offset_col, "offset");
    if (r.begin >= r.end) {
      throw InputError(label, where("lower"),
                       fmt::format("lower {} is not below upper {}", r.begin, r.end));
    }
    if (r.bytes > kMaxTotalBytes - total_bytes) {
      throw InputError(label, where("size"),
                       fmt::format("the sizes add up past {} (2^61) bytes", kMaxTotalBytes));
    }
    total_bytes += r.bytes;
    const std::string& id = fields[static_cast<std::size_t>(id_col)];
    if (!ids.insert(id).second)
      throw InputError(label, where("id"), fmt::format("duplicate id {}", quote_input(id)));
    if (offset_col >= 0) fields.erase(fields.begin() + offset_col);
    if (table.requests.size() >= (std::size_t{1} << 31))
      throw InputError(label, where(""), "more than 2^31 buffers");
    table.rows.push_back(std::move(fields));
    table.requests.push_back(r);
  }
  if (table.header.empty())
    throw InputError(label, "line 1", "empty file: expected the header id,lower,upper,size");
  return table;
}

PoolTable read_pool_csv(const std::string& path) {
  // The input-file limit: /dev/zero or a 2 GiB table ended in "out of memory".
  return parse_pool_csv(read_text_file(path), path);
}

std::string format_pool_csv(const PoolTable& table, const std::vector<int64_t>& offsets) {
  std::string out;
  for (const std::string& column : table.header) out += column + ",";
  out += "offset\n";
  for (std::size_t i = 0; i < table.rows.size(); ++i) {
    for (const std::string& field : table.rows[i]) out += field + ",";
    out += std::to_string(offsets[i]) + "\n";
  }
  return out;
}

PoolTable make_pool_table(const std::vector<PoolRequest>& requests) {
  PoolTable table;
  table.header = {"id", "lower", "upper", "size"};
  const bool aligned = std::any_of(requests.begin(), requests.end(),
                                   [](const PoolRequest& r) { return r.alignment > 0; });
  if (aligned) table.header.push_back("alignment");
  table.requests = requests;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const PoolRequest& r = requests[i];
    table.rows.push_back({std::to_string(i), std::to_string(r.begin), std::to_string(r.end),
                          std::to_string(r.bytes)});
    if (aligned) table.rows.back().push_back(std::to_string(r.alignment > 0 ? r.alignment : 1));
  }
  return table;
}

std::string format_pool_csv(const PoolTable& table) {
  std::string out;
  for (std::size_t c = 0; c < table.header.size(); ++c) out += (c > 0 ? "," : "") + table.header[c];
  out += "\n";
  for (const auto& row : table.rows) {
    for (std::size_t c = 0; c < row.size(); ++c) out += (c > 0 ? "," : "") + row[c];
    out += "\n";
  }
  return out;
}

}  // namespace shardplan
