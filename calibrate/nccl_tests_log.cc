#include "calibrate/nccl_tests_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "models/error.h"

namespace shardplan {
namespace {

// nccl-tests' binary names (src/*.cu) and the collective each measures.
constexpr std::pair<std::string_view, Collective> kBinaries[] = {
    {"all_reduce", Collective::all_reduce},
    {"all_gather", Collective::all_gather},
    {"reduce_scatter", Collective::reduce_scatter},
    {"alltoall", Collective::all_to_all},
    {"sendrecv", Collective::send_recv}};

// A count the log prints as digits (a rank, nGpus); one past int64 is an input error, not
// std::stoll's out_of_range (found by the nccl_tests_log fuzz target).
int64_t count_in(const std::string& digits, const std::string& file, const std::string& where,
                 std::string_view what) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    throw InputError(file, where, fmt::format("{} '{}' is not a count", what, digits));
  }
  return value;
}

std::optional<Collective> collective_in(std::string_view text) {
  for (const auto& [name, op] : kBinaries) {
    if (text.find(name) != std::string_view::npos) return op;
  }
  return std::nullopt;
}

std::vector<std::string_view> split_words(std::string_view line) {
  std::vector<std::string_view> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    const std::size_t start = i;
    while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) ++i;
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

}  // namespace

NcclTestsLog parse_nccl_tests_log(std::string_view text, const std::string& file) {
  NcclTestsLog log;
  log.file = file;
  std::optional<Collective> op;
  // Rank -> host; a rank seen twice means each process ran alone (nccl-tests built
  // without MPI): the table is then one process's, not the job's.
  std::map<int64_t, std::string> hosts;
  static const std::regex kRank(
      R"(^#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)$)");
  struct Row {
    double bytes, oop_us, ip_us;
    int64_t line;
  };
  std::vector<Row> rows;
  std::istringstream in{std::string(text)};
  std::string line;
  int64_t number_of_line = 0;
  while (std::getline(in, line)) {
    ++number_of_line;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string where = fmt::format("line {}", number_of_line);
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (line[first] == '#') {
      const std::string_view rest = std::string_view(line).substr(first);
      if (rest.find("Collective test starting:") != std::string_view::npos) {
        op = collective_in(rest);
        if (!op) {
          throw InputError(file, where,
                           fmt::format("'{}': not a collective shardplan models (all_reduce, "
                                       "all_gather, reduce_scatter, alltoall, sendrecv)",
                                       rest));
        }
      }
      std::smatch m;
      const std::string trimmed(rest);
      static const std::regex kThreads(R"(^#\s*nThread\s+\d+\s+nGpus\s+(\d+))");
      if (std::regex_search(trimmed, m, kThreads))
        log.gpus_per_process = count_in(m[1].str(), file, where, "nGpus");
      if (std::regex_match(trimmed, m, kRank)) {
        const int64_t rank = count_in(m[1].str(), file, where, "rank");
        if (hosts.contains(rank)) {
          throw InputError(file, where,
                           fmt::format("rank {} is listed twice: each process ran alone "
                                       "(nccl-tests built without MPI=1?), so the table is "
                                       "not the job's",
                                       rank));
        }
        hosts[rank] = m[2].str();
        if (rank == 0) log.device = m[3].str();
      }
      continue;
    }
    const std::vector<std::string_view> words = split_words(line);
    // size count type [redop] [root] | time algbw busbw #wrong | time algbw busbw #wrong
    const auto size = words.empty() ? std::nullopt : number(words[0]);
    if (!size || words.size() < 11) continue;  // not a table row (MPI or NCCL chatter)
    const std::size_t n = words.size();
    const auto oop_time = number(words[n - 8]);
    const auto oop_algbw = number(words[n - 7]);
    const auto ip_time = number(words[n - 4]);
    if (!oop_time || !oop_algbw || !ip_time) {
      throw InputError(file, where,
                       "a table row whose time and algbw columns are not numbers: not "
                       "nccl-tests output as its binaries print it");
    }
    if (*size <= 0) continue;  // all_gather's rows below one element per rank
    if (*oop_time <= 0 || *ip_time <= 0) {
      throw InputError(file, where,
                       fmt::format("time must be positive, got {} and {} us", *oop_time, *ip_time));
    }
    // algbw = size / time in GB/s, printed with two decimals.
    const double expected = *size / (*oop_time * 1e3);
    if (std::abs(expected - *oop_algbw) > std::max(0.011, 0.02 * expected)) {
      throw InputError(file, where,
                       fmt::format("algbw {} GB/s is not size / time = {:.2f}: the columns are "
                                   "not nccl-tests' (size, time in us, algbw in GB/s)",
                                   *oop_algbw, expected));
    }
    rows.push_back({*size, *oop_time, *ip_time, number_of_line});
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
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_nccl_tests_log(text.str(), path);
}

}  // namespace shardplan
