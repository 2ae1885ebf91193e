#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// Text safe inside HTML elements and quoted attributes (& < > " ').
std::string html_escape(std::string_view text);

// "1.234 s", "12.34 ms", "56.7 us": a duration in the unit that reads best.
std::string format_seconds(double seconds);

// "1.50 GiB", "512.0 MiB", "320 B"; negative values keep their sign.
std::string format_bytes(double bytes);
// "8.03 B", "70.6 M", "512 K" (decimal, as parameter counts are published).
std::string format_count(double count);
// "989.4 T", "1.98 P" FLOP-style decimal prefixes.
std::string format_si(double value);

// "4096", "64K", "64KiB" (binary, as nccl-tests' -b/-e read them), "1GB" (decimal): a
// positive size in bytes up to `max_bytes`; anything else is an InputError naming `flag`.
double parse_size(const std::string& text, const std::string& flag, double max_bytes);

// A plain text table: a header row, then rows; columns are padded to the widest cell.
// Columns listed in `right_aligned` (0-based) are right-aligned (numbers).
std::string render_table(const std::vector<std::string>& header,
                         const std::vector<std::vector<std::string>>& rows,
                         const std::vector<std::size_t>& right_aligned = {});

}  // namespace shardplan
