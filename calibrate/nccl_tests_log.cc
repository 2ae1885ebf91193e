#include "calibrate/nccl_tests_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>

#include "calibrate/fit_stats.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"

namespace shardplan {
namespace {

// nccl-tests' binary names (src/*.cu) and the collective each measures.
constexpr std::pair<std::string_view, Collective> kBinaries[] = {
    {"all_reduce", Collective::all_reduce},
    {"all_gather", Collective::all_gather},
    {"reduce_scatter", Collective::reduce_scatter},
    {"alltoall", Collective::all_to_all},
    {"sendrecv", Collective::send_recv}};

// Size rows in one log: 4x the 16,384 rows of the finest sweep nccl-tests is run with in
// practice (-b 1M -e 16G -i 1M); -i 1M to 2 GiB prints 2,048. More is not a log of one
// run, and would only make the fit slow.
constexpr std::size_t kMaxRows = 65'536;

std::optional<Collective> collective_in(std::string_view text) {
  for (const auto& [name, op] : kBinaries) {
    if (text.find(name) != std::string_view::npos) return op;
  }
  return std::nullopt;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r';
}

// The words of a line, split at blanks: a plain tokenizer, linear in the line and flat on
// the stack whatever its length (std::regex recursed per character and overflowed the
// stack on a 30 KB '#  Rank' line).
std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    const std::size_t start = i;
    while (i < line.size() && !is_space(line[i])) ++i;
    if (i > start) words.push_back(line.substr(start, i - start));
  }
  return words;
}

std::optional<double> number(std::string_view word) {
  double v = 0;
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
  if (ec != std::errc() || end != word.data() + word.size() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

// A count the log prints as digits (a rank, nGpus, a pid), inside [lo, hi]; anything else
// is an InputError naming the line (a count past int64 used to escape as std::stoll's
// out_of_range, found by the nccl_tests_log fuzz target).
int64_t count_in(std::string_view word, int64_t lo, int64_t hi, const std::string& file,
                 const std::string& where, std::string_view what) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (ec != std::errc() || end != word.data() + word.size()) {
    throw InputError(file, where, fmt::format("{} {} is not a count", what, quote_input(word)));
  }
  if (value < lo || value > hi) {
    throw InputError(file, where,
                     fmt::format("{} must be in [{}, {}], got {}", what, lo, hi, value));
  }
  return value;
}

bool all_digits(std::string_view word) {
  return !word.empty() &&
         std::all_of(word.begin(), word.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// One '#  Rank N [Group G] Pid P on HOST device D [BUS] NAME' line (the Group column came
// with nccl-tests 2.10; NAME may have blanks).
struct RankLine {
  int64_t rank = 0;
  std::string_view host;
  std::string_view device;
};

std::optional<RankLine> parse_rank_line(std::string_view rest, const std::string& file,
                                        const std::string& where) {
  // `rest` starts after '#': "  Rank  0 Group  0 Pid 12 on host device  0 [0x1b] NAME".
  const std::vector<std::string_view> w = split_words(rest);
  if (w.empty() || w[0] != "Rank") return std::nullopt;
  std::size_t i = 2;
  const bool grouped = w.size() > 3 && w[2] == "Group";
  if (grouped) i = 4;
  const bool well_formed = w.size() >= i + 7 && all_digits(w[1]) &&
                           (!grouped || all_digits(w[3])) && w[i] == "Pid" &&
                           all_digits(w[i + 1]) && w[i + 2] == "on" && w[i + 4] == "device" &&
                           all_digits(w[i + 5]) && w[i + 6].starts_with('[');
  if (!well_formed) {
    throw InputError(file, where,
                     "a '#  Rank' line not as nccl-tests prints it ('#  Rank N Group G Pid P on "
                     "HOST device D [BUS] NAME')");
  }
  RankLine line{.rank = count_in(w[1], 0, limits::kMaxGpus - 1, file, where, "rank"),
                .host = w[i + 3]};
  // NAME: what follows the bus id's closing bracket.
  const std::size_t bus = static_cast<std::size_t>(w[i + 6].data() - rest.data());
  const std::size_t close = rest.find(']', bus);
  if (close == std::string_view::npos) {
    throw InputError(file, where, "a '#  Rank' line whose bus id has no closing ']'");
  }
  std::string_view name = rest.substr(close + 1);
  while (!name.empty() && is_space(name.front())) name.remove_prefix(1);
  while (!name.empty() && is_space(name.back())) name.remove_suffix(1);
  line.device = name;
  return line;
}

// "# nThread T nGpus G minBytes ...": G, the GPUs one process drives (-g).
std::optional<int64_t> gpus_per_process(std::string_view rest, const std::string& file,
                                        const std::string& where) {
  const std::vector<std::string_view> w = split_words(rest);
  if (w.size() < 4 || w[0] != "nThread" || w[2] != "nGpus") return std::nullopt;
  // GPUs one process drives all sit in one node.
  return count_in(w[3], 1, limits::kMaxGpusPerNode, file, where, "nGpus");
}

struct Row {
  double bytes, oop_us, ip_us;
  int64_t line;
};

// One table row, `size count type [redop] [root] | time algbw busbw #wrong | time algbw
// busbw #wrong`, read from its end; nullopt for lines that are not rows (MPI or NCCL
// chatter).
std::optional<Row> parse_row(std::string_view line, int64_t line_number, const std::string& file,
                             const std::string& where) {
  const std::vector<std::string_view> words = split_words(line);
  const auto size = words.empty() ? std::nullopt : number(words[0]);
  if (!size || words.size() < 11) return std::nullopt;
  const std::size_t n = words.size();
  const auto oop_time = number(words[n - 8]);
  const auto oop_algbw = number(words[n - 7]);
  const auto ip_time = number(words[n - 4]);
  if (!oop_time || !oop_algbw || !ip_time) {
    throw InputError(file, where,
                     "a table row whose time and algbw columns are not numbers: not "
                     "nccl-tests output as its binaries print it");
  }
  if (*size < 0 || *size > kMaxCollectiveBytes || *size != std::floor(*size)) {
    throw InputError(file, where,
                     fmt::format("size {:g} is not a byte count nccl-tests prints (a whole "
                                 "number from 0 to 2^50)",
                                 *size));
  }
  if (*size == 0) return Row{0, 0, 0, line_number};  // all_gather's rows below one element
  const double max_us = kMaxMeasuredSeconds * 1e6;
  for (const double us : {*oop_time, *ip_time}) {
    if (!(us > 0 && us <= max_us)) {
      throw InputError(file, where,
                       fmt::format("time must be positive and at most an hour ({:g} us), got {:g} "
                                   "and {:g} us",
                                   max_us, *oop_time, *ip_time));
    }
  }
  // algbw = size / time in GB/s, printed with two decimals.
  const double expected = *size / (*oop_time * 1e3);
  if (std::abs(expected - *oop_algbw) > std::max(0.011, 0.02 * expected)) {
    throw InputError(file, where,
                     fmt::format("algbw {:g} GB/s is not size / time = {:.2f}: the columns are "
                                 "not nccl-tests' (size, time in us, algbw in GB/s)",
                                 *oop_algbw, expected));
  }
  return Row{*size, *oop_time, *ip_time, line_number};
}

}  // namespace

NcclTestsLog parse_nccl_tests_log(std::string_view text, const std::string& file) {
  NcclTestsLog log;
  log.file = file;
  std::optional<Collective> op;
  // Rank -> host; a rank seen twice means each process ran alone (nccl-tests built
  // without MPI): the table is then one process's, not the job's.
  std::map<int64_t, std::string> hosts;
  std::vector<Row> rows;
  int64_t number_of_line = 0;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    ++number_of_line;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos) continue;
    const std::string where = fmt::format("line {}", number_of_line);
    if (line[first] == '#') {
      const std::string_view rest = line.substr(first + 1);
      if (rest.find("Collective test starting:") != std::string_view::npos) {
        op = collective_in(rest);
        if (!op) {
          throw InputError(file, where,
                           fmt::format("{}: not a collective shardplan models (all_reduce, "
                                       "all_gather, reduce_scatter, alltoall, sendrecv)",
                                       quote_input(line.substr(first))));
        }
      }
      if (const auto gpus = gpus_per_process(rest, file, where)) log.gpus_per_process = *gpus;
      if (const auto rank_line = parse_rank_line(rest, file, where)) {
        if (hosts.contains(rank_line->rank)) {
          throw InputError(file, where,
                           fmt::format("rank {} is listed twice: each process ran alone "
                                       "(nccl-tests built without MPI=1?), so the table is "
                                       "not the job's",
                                       rank_line->rank));
        }
        hosts[rank_line->rank] = std::string(rank_line->host);
        if (rank_line->rank == 0) log.device = std::string(rank_line->device);
      }
      continue;
    }
    const std::optional<Row> row = parse_row(line, number_of_line, file, where);
    if (!row || row->bytes == 0) continue;
    if (rows.size() == kMaxRows) {
      throw InputError(file, where,
                       fmt::format("more than {} size rows: one nccl-tests run prints far fewer "
                                   "(-b 1M -e 16G -i 1M prints 16,384); split the log by run",
                                   kMaxRows));
    }
    rows.push_back(*row);
  }
  if (!op) op = collective_in(std::filesystem::path(file).filename().string());
  if (!op) {
    throw InputError(file, "header",
                     "no '# Collective test starting: X_perf' line and no collective in the file "
                     "name (all_reduce, all_gather, reduce_scatter, alltoall, sendrecv): cannot "
                     "tell which collective ran");
  }
  if (hosts.empty()) {
    throw InputError(file, "header",
                     "no '#  Rank N Group G Pid P on HOST device D' lines: cannot tell how many "
                     "ranks ran");
  }
  if (rows.empty()) throw InputError(file, "rows", "no table rows (size count type ... time)");
  log.op = *op;
  log.ranks = static_cast<int64_t>(hosts.size());
  if (log.ranks < 2) {
    throw InputError(file, "header", "one rank: no collective between ranks to fit");
  }
  if (hosts.rbegin()->first != log.ranks - 1) {
    throw InputError(file, "header",
                     fmt::format("ranks are not 0..{}: some '#  Rank' lines are missing",
                                 hosts.rbegin()->first));
  }
  std::map<std::string, int64_t> per_host;
  for (const auto& [rank, host] : hosts) ++per_host[host];
  log.nodes = static_cast<int64_t>(per_host.size());
  int64_t most = 0;
  for (const auto& [host, count] : per_host) most = std::max(most, count);
  if (log.gpus_per_process > most) {
    throw InputError(file, "header",
                     fmt::format("nGpus {} (GPUs per process) is more than the {} ranks any "
                                 "host lists: the header and the '#  Rank' lines disagree",
                                 log.gpus_per_process, most));
  }
  const RankLayout layout{.ranks = log.ranks, .ranks_per_node = most};
  double floor_us = 0;
  if (log.gpus_per_process > 1) {
    const auto smallest = std::min_element(
        rows.begin(), rows.end(), [](const Row& x, const Row& y) { return x.bytes < y.bytes; });
    floor_us = 1.5 * std::min(smallest->oop_us, smallest->ip_us);
  }
  for (const Row& r : rows) {
    if (std::min(r.oop_us, r.ip_us) < floor_us) {
      ++log.rows_at_launch_floor;
      continue;
    }
    for (const auto& [us, kind] : {std::pair{r.oop_us, "out-of-place"}, {r.ip_us, "in-place"}}) {
      log.samples.push_back({.op = log.op,
                             .layout = layout,
                             .bytes = r.bytes,
                             .seconds = us * 1e-6,
                             .where = fmt::format("{}:{} {}", file, r.line, kind)});
    }
  }
  if (log.samples.empty()) {
    throw InputError(file, "rows",
                     fmt::format("all {} rows sit at the launch floor of one process driving {} "
                                 "GPUs (-g {}): nothing left to fit; run nccl-tests with one "
                                 "process per GPU (mpirun -np N ... -g 1) or to larger sizes",
                                 rows.size(), log.gpus_per_process, log.gpus_per_process));
  }
  return log;
}

NcclTestsLog read_nccl_tests_log(const std::string& path) {
  // read_text_file refuses a directory, a device such as /dev/zero and a file past the
  // input size limit by name.
  return parse_nccl_tests_log(read_text_file(path), path);
}

}  // namespace shardplan
