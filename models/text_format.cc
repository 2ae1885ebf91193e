#include "models/text_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "models/error.h"

namespace shardplan {

// "4096", "64K", "64KiB" (binary, as nccl-tests' -b/-e read them), "1GB" (decimal).
double parse_size(const std::string& text, const std::string& flag, double max_bytes) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw InputError("", flag,
                     fmt::format("expected a size such as 4096, 64K, 1GiB; got '{}'", text));
  }
  const std::string unit = text.substr(used);
  const std::vector<std::pair<std::string, double>> units = {{"", 1},
                                                             {"B", 1},
                                                             {"K", 1024.0},
                                                             {"KiB", 1024.0},
                                                             {"KB", 1e3},
                                                             {"M", 1048576.0},
                                                             {"MiB", 1048576.0},
                                                             {"MB", 1e6},
                                                             {"G", 1073741824.0},
                                                             {"GiB", 1073741824.0},
                                                             {"GB", 1e9}};
  for (const auto& [name, scale] : units) {
    if (unit == name) {
      if (!(value > 0) || !std::isfinite(value)) throw InputError("", flag, "must be positive");
      if (!(value * scale >= 1)) {
        throw InputError("", flag, fmt::format("must be at least 1 byte, got '{}'", text));
      }
      if (!(value * scale <= max_bytes)) {
        throw InputError("", flag,
                         fmt::format("must be at most {} ({:.0f} bytes), got '{}'",
                                     format_bytes(max_bytes), max_bytes, text));
      }
      return value * scale;
    }
  }
  throw InputError(
      "", flag, fmt::format("unknown unit '{}' (use K, M, G, KiB, MiB, GiB, KB, MB or GB)", unit));
}

std::string html_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string format_seconds(double s) {
  if (std::abs(s) >= 1) return fmt::format("{:.3f} s", s);
  if (std::abs(s) >= 1e-3) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

std::string format_bytes(double bytes) {
  const double magnitude = std::fabs(bytes);
  constexpr double kKiB = 1024.0;
  if (magnitude >= kKiB * kKiB * kKiB)
    return fmt::format("{:.2f} GiB", bytes / (kKiB * kKiB * kKiB));
  if (magnitude >= kKiB * kKiB) return fmt::format("{:.1f} MiB", bytes / (kKiB * kKiB));
  if (magnitude >= kKiB) return fmt::format("{:.1f} KiB", bytes / kKiB);
  return fmt::format("{:.0f} B", bytes);
}

std::string format_count(double count) {
  const double magnitude = std::fabs(count);
  if (magnitude >= 1e12) return fmt::format("{:.2f} T", count / 1e12);
  if (magnitude >= 1e9) return fmt::format("{:.2f} B", count / 1e9);
  if (magnitude >= 1e6) return fmt::format("{:.1f} M", count / 1e6);
  if (magnitude >= 1e3) return fmt::format("{:.1f} K", count / 1e3);
  return fmt::format("{:.0f}", count);
}

std::string format_si(double value) {
  const double magnitude = std::fabs(value);
  if (magnitude >= 1e15) return fmt::format("{:.2f} P", value / 1e15);
  if (magnitude >= 1e12) return fmt::format("{:.1f} T", value / 1e12);
  if (magnitude >= 1e9) return fmt::format("{:.1f} G", value / 1e9);
  if (magnitude >= 1e6) return fmt::format("{:.1f} M", value / 1e6);
  if (magnitude >= 1e3) return fmt::format("{:.1f} K", value / 1e3);
  return fmt::format("{:.0f} ", value);  // the space a prefix would take: "0 FLOP"
}

std::string render_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows,
                         const std::vector<std::size_t>& right_aligned) {
  std::vector<std::size_t> widths(header.size(), 0);
  auto widen = [&](const std::vector<std::string>& row) {
    for (std::size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  };
  widen(header);
  for (const auto& row : rows) widen(row);
  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (std::size_t i = 0; i < widths.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      const bool right =
          std::find(right_aligned.begin(), right_aligned.end(), i) != right_aligned.end();
      out +=
          right ? fmt::format("{:>{}}", cell, widths[i]) : fmt::format("{:<{}}", cell, widths[i]);
      if (i + 1 < widths.size()) out += "  ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(header);
  std::size_t total = 0;
  for (std::size_t w : widths) total += w;
  out += std::string(total + 2 * (widths.size() - 1), '-') + "\n";
  for (const auto& row : rows) out += line(row);
  return out;
}

}  // namespace shardplan
