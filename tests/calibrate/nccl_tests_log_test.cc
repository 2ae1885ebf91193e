// The nccl-tests parser on real output (tests/data/nccl-tests, as its binaries printed it)
// and on every way a log can be wrong.
#include "calibrate/nccl_tests_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "calibrate/calibrate.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

using testing::expect_input_error;

const std::string kDir = std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/nccl-tests/8xh100-g8/";

TEST(NcclTestsLog, ReadsTogetherH100AllGather) {
  const NcclTestsLog log = read_nccl_tests_log(kDir + "all_gather_ring.out");
  EXPECT_EQ(log.op, Collective::all_gather);
  EXPECT_EQ(log.ranks, 8);
  EXPECT_EQ(log.nodes, 1);
  EXPECT_EQ(log.gpus_per_process, 8);
  EXPECT_EQ(log.device, "NVIDIA H100 80GB HBM3");
  // 27 sized rows (128 B .. 8 GiB; the four 0-byte rows are skipped); with -g 8 the rows
  // within 50 % of the 128 B row's 34.61 µs (up to 8 MiB, 46.16 µs) measure the launch.
  EXPECT_EQ(log.rows_at_launch_floor, 17);
  ASSERT_EQ(log.samples.size(), 2u * (27 - 17));
  const CollectiveSample& first = log.samples.front();
  EXPECT_EQ(first.bytes, 16777216);
  EXPECT_DOUBLE_EQ(first.seconds, 70.80e-6);           // out-of-place
  EXPECT_DOUBLE_EQ(log.samples[1].seconds, 68.51e-6);  // in-place
  EXPECT_EQ(first.layout.ranks, 8);
  EXPECT_EQ(first.layout.ranks_per_node, 8);
  EXPECT_NE(first.where.find("all_gather_ring.out:"), std::string::npos);
  EXPECT_DOUBLE_EQ(log.samples.back().seconds, 20684.4e-6);
}

// One rank per process on two hosts, an older layout without the root column, and MPI
// chatter between the rows.
TEST(NcclTestsLog, ReadsRanksPerHostAndOlderColumns) {
  const std::string text =
      "# Collective test starting: sendrecv_perf\n"
      "# nThread 1 nGpus 1 minBytes 1024 maxBytes 2048 step: 2(factor)\n"
      "#  Rank  0 Group  0 Pid 11 on node-a device  0 [0x1b] NVIDIA A100-SXM4-80GB\n"
      "#  Rank  1 Group  0 Pid 12 on node-a device  1 [0x1c] NVIDIA A100-SXM4-80GB\n"
      "#  Rank  2 Group  0 Pid 13 on node-b device  0 [0x1b] NVIDIA A100-SXM4-80GB\n"
      "#  Rank  3 Group  0 Pid 14 on node-b device  1 [0x1c] NVIDIA A100-SXM4-80GB\n"
      "        1024     256     float     sum    20.00    0.05    0.05  0e+00    21.00    0.05    "
      "0.05  0e+00\n"
      "[node-a:11] 3 more processes have sent help message\n"
      "        2048     512     float     sum    20.48    0.10    0.10      0    20.00    0.10    "
      "0.10    N/A\n";
  const NcclTestsLog log = parse_nccl_tests_log(text, "x.log");
  EXPECT_EQ(log.op, Collective::send_recv);
  EXPECT_EQ(log.ranks, 4);
  EXPECT_EQ(log.nodes, 2);
  EXPECT_EQ(log.rows_at_launch_floor, 0);
  ASSERT_EQ(log.samples.size(), 4u);
  EXPECT_EQ(log.samples[0].layout.ranks_per_node, 2);
  EXPECT_DOUBLE_EQ(log.samples[3].seconds, 20.00e-6);
}

TEST(NcclTestsLog, CollectiveFromTheFileNameWithoutTheStartLine) {
  const std::string text =
      "#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] G\n"
      "#  Rank  1 Group  0 Pid 2 on h device  1 [0x2] G\n"
      "  1048576  262144  float  sum  -1  10.00  104.86  104.86  0  10.00  104.86  104.86  0\n";
  EXPECT_EQ(parse_nccl_tests_log(text, "logs/reduce_scatter_perf.txt").op,
            Collective::reduce_scatter);
  expect_input_error([&] { parse_nccl_tests_log(text, "logs/run1.txt"); }, "header",
                     "cannot tell which collective ran", "logs/run1.txt");
}

TEST(NcclTestsLog, BadLogsAreClearErrors) {
  const std::string rank0 = "#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] G\n";
  const std::string rank1 = "#  Rank  1 Group  0 Pid 2 on h device  1 [0x2] G\n";
  const std::string start = "# Collective test starting: all_reduce_perf\n";
  const std::string row =
      "  1048576  262144  float  sum  -1  10.00  104.86  104.86  0  10.00  104.86  104.86  0\n";
  expect_input_error([&] { parse_nccl_tests_log(start + row, "a.log"); }, "header",
                     "cannot tell how many ranks ran");
  expect_input_error([&] { parse_nccl_tests_log(start + rank0 + rank0 + row, "a.log"); }, "line 3",
                     "rank 0 is listed twice");
  expect_input_error([&] { parse_nccl_tests_log(start + rank0 + rank1, "a.log"); }, "rows",
                     "no table rows");
  expect_input_error(
      [&] {
        parse_nccl_tests_log(start + rank0 + rank1 +
                                 "  1048576  262144  float  sum  -1  10.00  1.00  1.00  0  10.00  "
                                 "1.00  1.00  0\n",
                             "a.log");
      },
      "line 4", "is not size / time");
  expect_input_error(
      [&] {
        parse_nccl_tests_log(start + rank0 + rank1 +
                                 "  1048576  262144  float  sum  -1  0.00  0.00  0.00  0  0.00  "
                                 "0.00  0.00  0\n",
                             "a.log");
      },
      "line 4", "time must be positive");
  expect_input_error(
      [&] {
        parse_nccl_tests_log(
            start + rank0 + rank1 +
                "  1048576  262144  float  sum  -1  fast  104.86  104.86  0  10.00  "
                "104.86  104.86  0\n",
            "a.log");
      },
      "line 4", "not numbers");
  expect_input_error(
      [&] { parse_nccl_tests_log("# Collective test starting: broadcast_perf\n", "a.log"); },
      "line 1", "not a collective shardplan models");
  expect_input_error([&] { read_nccl_tests_log("/nonexistent/all_reduce.log"); }, "",
                     "cannot open");
  expect_input_error([&] { parse_nccl_tests_log(start + rank0 + row, "a.log"); }, "header",
                     "one rank");
  // -g 2 and every row within half of the smallest size's time: all launch floor.
  expect_input_error(
      [&] {
        parse_nccl_tests_log(
            start + "# nThread 1 nGpus 2 minBytes 8 maxBytes 16\n" + rank0 + rank1 +
                "  1024  256  float  sum  -1  10.00  0.10  0.10  0  10.00  0.10  0.10  0\n"
                "  2048  512  float  sum  -1  11.00  0.19  0.19  0  11.00  0.19  0.19  0\n",
            "a.log");
      },
      "rows", "launch floor");
  // Found by the fuzz target: counts past int64 were std::stoll's out_of_range.
  expect_input_error(
      [&] {
        parse_nccl_tests_log(start +
                                 "#  Rank  99999999999999999999 Group  0 Pid 1 on h device  "
                                 "0 [0x1] G\n",
                             "a.log");
      },
      "line 2", "rank '99999999999999999999' is not a count");
  expect_input_error(
      [&] {
        parse_nccl_tests_log(start + "# nThread 1 nGpus 99999999999999999999 minBytes 8\n",
                             "a.log");
      },
      "line 2", "nGpus '99999999999999999999' is not a count");
}

}  // namespace
}  // namespace shardplan

namespace shardplan {
namespace {

TEST(ProbeFile, BadProbesAreClearErrors) {
  auto probe = [](const std::string& body) {
    const std::string path =
        (std::filesystem::temp_directory_path() / "shardplan-bad-probe.json").string();
    std::ofstream(path) << body;
    return path;
  };
  const std::string ok_table =
      R"({"op": "all_reduce", "group": "world", "ranks": 4, "ranks_per_node": 4,
          "rows": [{"bytes": 1024, "seconds": 1e-5}]})";
  std::string path = probe(R"({"probe_version": 1, "collectives": [)" + ok_table + "]}");
  ASSERT_EQ(read_probe_file(path).collectives.size(), 1u);
  EXPECT_EQ(read_probe_file(path).collectives[0].layout.ranks, 4);
  path = probe(R"({"probe_version": 2, "collectives": []})");
  testing::expect_input_error([&] { read_probe_file(path); }, "/probe_version", "reads version 1");
  path = probe(R"({"probe_version": 1, "collectives": [{"op": "broadcast", "group": "world",
                  "ranks": 4, "ranks_per_node": 4, "rows": []}]})");
  testing::expect_input_error([&] { read_probe_file(path); }, "/collectives/0/op", "broadcast");
  path = probe(R"({"probe_version": 1, "collectives": [{"op": "all_reduce", "group": "world",
                  "ranks": 4, "ranks_per_node": 4, "rows": [{"bytes": 1024, "seconds": -1}]}]})");
  testing::expect_input_error([&] { read_probe_file(path); }, "/collectives/0/rows/0/seconds",
                              "must be in");
  path = probe(R"({"probe_version": 1, "collectives": []})");
  testing::expect_input_error([&] { read_probe_file(path); }, "/collectives",
                              "no measured collectives or kernels");
  std::filesystem::remove(path);
}

// What the bad-input campaign of issue 33 found: counts and sizes no nccl-tests run prints
// were read silently, a long '#  Rank' line overflowed std::regex's stack, and a directory
// was read as an empty log.
TEST(NcclTestsLog, CountsAndSizesNoRunPrintsAreRefusedByLine) {
  const std::string start = "# Collective test starting: all_reduce_perf\n";
  const std::string ranks =
      "#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] G\n"
      "#  Rank  1 Group  0 Pid 2 on h device  1 [0x2] G\n";
  const std::string row =
      "  1048576  262144  float  sum  -1  10.00  104.86  104.86  0  10.00  104.86  104.86  0\n";
  for (const char* gpus : {"0", "-3", "2000"}) {
    SCOPED_TRACE(gpus);
    expect_input_error(
        [&] {
          parse_nccl_tests_log(
              start + "# nThread 1 nGpus " + gpus + " minBytes 8 maxBytes 16\n" + ranks + row,
              "a.log");
        },
        "line 2", "nGpus must be in [1, 1024]", "a.log");
  }
  expect_input_error(
      [&] {
        parse_nccl_tests_log(start + ranks +
                                 "  -1  262144  float  sum  -1  10.00  104.86  104.86  0  10.00  "
                                 "104.86  104.86  0\n",
                             "a.log");
      },
      "line 4", "size -1 is not a byte count");
  expect_input_error(
      [&] {
        parse_nccl_tests_log(start + ranks +
                                 "  1048576  262144  float  sum  -1  1e308  0.00  0.00  0  10.00  "
                                 "104.86  104.86  0\n",
                             "a.log");
      },
      "line 4", "at most an hour");
  // nGpus 4 with two ranks on the one host: the header and the rank lines disagree.
  expect_input_error(
      [&] {
        parse_nccl_tests_log(start + "# nThread 1 nGpus 4 minBytes 8\n" + ranks + row, "a.log");
      },
      "header", "nGpus 4");
  expect_input_error(
      [&] {
        parse_nccl_tests_log(start + "#  Rank  0 Group  0 Pid 1 on h device\n" + ranks + row,
                             "a.log");
      },
      "line 2", "not as nccl-tests prints it");
}

TEST(NcclTestsLog, LongLinesParseInLinearTimeAndMessagesStayShort) {
  const std::string start = "# Collective test starting: all_reduce_perf\n";
  const std::string row =
      "  1048576  262144  float  sum  -1  10.00  104.86  104.86  0  10.00  104.86  104.86  0\n";
  // A 1 MB device name: read as the device, no stack overflow.
  const std::string name(1 << 20, 'G');
  const NcclTestsLog log = parse_nccl_tests_log(
      start + "#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] " + name +
          "\n#  Rank  1 Group  0 Pid 2 on h device  1 [0x2] " + name + "\n" + row,
      "a.log");
  EXPECT_EQ(log.ranks, 2);
  EXPECT_EQ(log.device.size(), name.size());
  // A 1 MB rank that is not a count, and a start line of binary bytes: short, printable.
  try {
    parse_nccl_tests_log(start + "#  Rank  " + std::string(1 << 20, '7') +
                             " Group  0 Pid 1 on h device  0 [0x1] G\n",
                         "a.log");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "line 2");
    EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
  }
  try {
    parse_nccl_tests_log(
        "# Collective test starting: \x01\xff\xfe" + std::string(1 << 20, 'x') + "\n", "a.log");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_LT(what.size(), 300u) << what;
    EXPECT_NE(what.find("\\x01"), std::string::npos) << what;
    EXPECT_EQ(what.find('\x01'), std::string::npos) << what;
  }
}

// nccl-tests before 2.10 printed no Group column.
TEST(NcclTestsLog, RankLinesWithoutTheGroupColumn) {
  const NcclTestsLog log = parse_nccl_tests_log(
      "# Collective test starting: all_gather_perf\n"
      "#   Rank  0 Pid  24546 on    dgx1 device  0 [0x06] Tesla V100-SXM2-16GB\n"
      "#   Rank  1 Pid  24547 on    dgx1 device  1 [0x07] Tesla V100-SXM2-16GB\n"
      "     1048576   131072  float    10.00  104.86   52.43    0    10.00  104.86   52.43  N/A\n",
      "a.log");
  EXPECT_EQ(log.ranks, 2);
  EXPECT_EQ(log.device, "Tesla V100-SXM2-16GB");
  EXPECT_EQ(log.samples.size(), 2u);
}

TEST(NcclTestsLog, RowsBeyondOneRunAreRefused) {
  std::string text =
      "# Collective test starting: all_reduce_perf\n"
      "#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] G\n"
      "#  Rank  1 Group  0 Pid 2 on h device  1 [0x2] G\n";
  const std::string row =
      "  1048576  262144  float  sum  -1  10.00  104.86  104.86  0  10.00  104.86  104.86  0\n";
  for (int i = 0; i < 65'537; ++i) text += row;
  expect_input_error([&] { parse_nccl_tests_log(text, "a.log"); }, "line 65540",
                     "more than 65536 size rows");
}

TEST(NcclTestsLog, ADirectoryOrADeviceIsNotALog) {
  expect_input_error([&] { read_nccl_tests_log(kDir); }, "", "is a directory", kDir);
  expect_input_error([&] { read_nccl_tests_log("/dev/zero"); }, "", "larger than");
}

}  // namespace
}  // namespace shardplan
