// `shardplan execute --backend cpu` under mpirun: a tiny model through every sharding
// strategy, HSDP, prefetch 0 and 2, recompute none and full, 2 micro-batches — all
// integrity checks pass; a broken plan is caught with the op named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <functional>
#include <limits>

#include "executor/cuda_probe.h"
#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

CommandResult mpirun(int ranks, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"--allow-run-as-root", "--oversubscribe", "-np",
                                   std::to_string(ranks), SHARDPLAN_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program("mpirun", argv);
}

std::string make_plan(int gpus, const std::vector<std::string>& sets, const std::string& name,
                      const std::string& model = "tiny") {
  const std::string path = write_temp_file(name, "");
  std::vector<std::string> args = {"plan", "--model", model, "--gpus", std::to_string(gpus),
                                   "-o",   path};
  for (const std::string& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  const CommandResult r = run_shardplan(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

struct Case {
  int ranks;
  std::vector<std::string> sets;
  std::string model = "tiny";
};

class ExecuteCpu : public ::testing::TestWithParam<Case> {};

TEST_P(ExecuteCpu, IntegrityChecksPass) {
  const Case& c = GetParam();
  std::vector<std::string> sets = c.sets;
  sets.push_back("grad_accum=2");
  const std::string plan = make_plan(c.ranks, sets, "exec_plan.json", c.model);
  const std::string measured = write_temp_file("measured.json", "");
  const CommandResult r = mpirun(
      c.ranks, {"execute", "--plan", plan, "--backend", "cpu", "--steps", "1", "-o", measured});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("integrity checks: all passed"));
  std::ifstream in(measured);
  const nlohmann::json t = nlohmann::json::parse(in);
  EXPECT_EQ(t["source"], "measured");
  EXPECT_GT(t["summary"]["step_seconds"].get<double>(), 0);
  EXPECT_GT(t["summary"]["compute_seconds"].get<double>(), 0);
  EXPECT_GE(t["summary"]["exposed_all_gather_seconds"].get<double>(), 0);
  for (const auto& op : t["ops"]) EXPECT_GE(op["end"].get<double>(), op["start"].get<double>());
}

// "np4_dp_outer_2_outer_strategy_optim": ranks and settings, as gtest names allow.
std::string case_name(const ::testing::TestParamInfo<Case>& param_info) {
  std::string name = "np" + std::to_string(param_info.param.ranks);
  if (param_info.param.model != "tiny") {
    name += "_";
    for (char ch : param_info.param.model)
      name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  }
  for (const std::string& s : param_info.param.sets) {
    name += "_";
    for (char ch : s) name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  }
  return name;
}

// One mpirun job per way collectives move data: all-reduce (no_shard), in place
// (ZeRO-1's gather after the step), shard into region and back (ZeRO-3), and across
// dp_outer (all-reduce; reduce-scatter and gather with the optimizer sharded there).
// Schedules (prefetch, recompute, drain, double buffering, buckets) replay in
// milliseconds on the fake backend (replay_test.cc); collectives' layout on the buffers
// is tested in-process (collective_parts_test.cc).
INSTANTIATE_TEST_SUITE_P(
    Strategies, ExecuteCpu,
    ::testing::Values(Case{2, {"sharding_strategy=no_shard"}}, Case{2, {"sharding_strategy=optim"}},
                      Case{2, {"sharding_strategy=optim_grads_params", "recompute=full"}},
                      Case{4, {"dp_outer=2"}}, Case{4, {"dp_outer=2", "outer_strategy=optim"}},
                      // PyTorch FSDP's layout: fp32 shards cast into bf16 (FP8) gathers, the
                      // step's gradients made by its first reduction; HSDP over them.
                      Case{2, {"stack=torch-eager"}},
                      Case{2, {"stack=torch-compile", "fp8_param_gather=true"}},
                      Case{4, {"stack=torch-compile", "dp_outer=2"}},
                      // no_sync: each unit's gradients summed unsharded across micro-batches
                      // (fp32 accumulators; bf16 ones with bf16 master weights and reduction)
                      // and reduce-scattered once, in the last.
                      Case{2, {"stack=torch-compile", "no_sync=true"}},
                      Case{4,
                           {"stack=torch-eager", "no_sync=true", "main_param_dtype=bf16",
                            "grad_reduce_dtype=bf16", "dp_outer=2"}},
                      // KempnerForge's layout: bf16 master weights and gradients reduced in
                      // fp32 (each shard's sums cast to bf16), no_sync, TP with the
                      // embedding replicated, the loss on bf16 logits.
                      Case{4,
                           {"stack=torch-compile", "main_param_dtype=bf16",
                            "grad_reduce_dtype=fp32", "no_sync=true", "tp=2",
                            "vocab_parallel_embedding=false", "loss_kernel=native", "seq_len=512"}},
                      // Activation offload: two layers' saved bytes to host and back, checked
                      // against what their forward wrote.
                      Case{2, {"offload_activations=2"}},
                      Case{2, {"offload_activations=3", "recompute=full"}}),
    case_name);

// Mixture of experts on an expert mesh at 4 and 8 ranks: the experts' all-gathers and
// reduce-scatters over their expert-data-parallel group beside the dense ones, the
// dispatch and combine as all-gathers and reduce-scatters over ep × etp (allgather) or
// all-to-alls over ep with gathers over etp (alltoall), every collective checked on real
// data (an all-to-all delivers each peer's chunk, so the combine's returns every
// dispatched token to the rank it left).
INSTANTIATE_TEST_SUITE_P(
    Experts, ExecuteCpu,
    ::testing::Values(
        Case{4, {"ep=2"}, "tiny-moe"}, Case{4, {"ep=4", "moe_dispatcher=alltoall"}, "tiny-moe"},
        Case{4, {"ep=2", "sharding_strategy=optim"}, "tiny-moe"},
        Case{8, {"tp=2", "ep=4", "etp=1", "moe_dispatcher=alltoall", "seq_len=512"}, "tiny-moe"},
        Case{8,
             {"ep=2", "etp=2", "moe_dispatcher=alltoall", "recompute=full", "seq_len=512"},
             "tiny-moe"},
        Case{8, {"cp=2", "ep=4", "sharding_strategy=no_shard", "seq_len=512"}, "tiny-moe"},
        // no_sync with fp32 accumulators: a backward writes the dense and the expert
        // accumulator of its unit, each checked on its own.
        Case{4, {"ep=2", "stack=torch-eager", "no_sync=true", "seq_len=128"}, "tiny-moe"},
        Case{4, {"ep=2", "moe_dispatcher=deepep", "seq_len=128"}, "tiny-moe"},
        // Megatron's moe recompute re-runs each layer's dispatch and combine inside its
        // backward (and layernorm + moe_act re-create their outputs there): the re-run
        // all-to-alls pair up as the forward's do.
        Case{4,
             {"ep=4", "moe_dispatcher=alltoall", "recompute=selective",
              "recompute_modules=[\"core_attn\",\"layernorm\",\"moe_act\",\"moe\"]", "seq_len=128"},
             "tiny-moe"}),
    case_name);

// The device mesh at 8 ranks under every sharding strategy: tensor parallelism (its
// all-gathers and reduce-scatters), context parallelism (ring send/recv) and both, with
// FSDP over dp_shard × cp and HSDP over dp_outer: every collective over its own
// sub-communicator, checked on real data.
std::vector<Case> mesh_cases() {
  std::vector<Case> cases;
  const std::vector<std::vector<std::string>> meshes = {
      {"tp=2", "dp_outer=2"}, {"cp=2", "dp_outer=2"}, {"tp=2", "cp=2"}};
  for (const auto& mesh : meshes) {
    for (const char* strategy : {"no_shard", "optim", "optim_grads", "optim_grads_params"}) {
      Case c{8, mesh};
      c.sets.push_back(std::string("sharding_strategy=") + strategy);
      c.sets.push_back("seq_len=512");
      cases.push_back(c);
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Mesh, ExecuteCpu, ::testing::ValuesIn(mesh_cases()), case_name);

// A MoE combine sent over the wrong communicator (the expert-data-parallel group instead
// of ep, both of 2 ranks on 4 GPUs) delivers every dispatched token to the wrong rank:
// the round trip check names it.
TEST(ExecuteCpuErrors, CombineThatReturnsTokensElsewhereIsCaught) {
  const std::string plan =
      make_plan(4, {"ep=2", "moe_dispatcher=alltoall", "seq_len=128"}, "moe_plan.json", "tiny-moe");
  std::ifstream in(plan);
  nlohmann::json j = nlohmann::json::parse(in);
  int64_t edp = -1;
  for (std::size_t g = 0; g < j["process_groups"].size(); ++g)
    if (j["process_groups"][g]["name"] == "edp") edp = static_cast<int64_t>(g);
  ASSERT_GE(edp, 0);
  int seen = 0;
  std::string name;
  for (auto& op : j["ops"]) {
    if (op["kind"] != "all_to_all" || ++seen != 2) continue;
    op["group"] = edp;  // the first pass's combine
    name = op["name"];
    break;
  }
  ASSERT_FALSE(name.empty());
  const std::string broken = write_temp_file("moe_wrong_group.json", j.dump());
  const CommandResult r = mpirun(4, {"execute", "--plan", broken, "--steps", "1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("the combine did not bring back the token byte"));
  EXPECT_THAT(r.err, HasSubstr("'" + name + "'"));
}

TEST(ExecuteCpuErrors, MissingDependencyIsCaughtWithTheOpNamed) {
  // The reduce-scatter of a layer loses its dependency on that layer's backward: it runs
  // as soon as its stream allows and reads the gradient buffer before anything wrote it.
  const std::string plan = make_plan(2, {}, "nodep_plan.json");
  std::ifstream in(plan);
  nlohmann::json j = nlohmann::json::parse(in);
  std::string name;
  for (auto& op : j["ops"]) {
    if (op["name"].get<std::string>().rfind("rs ", 0) == 0) {
      op["deps"] = nlohmann::json::array();
      name = op["name"];
      break;
    }
  }
  ASSERT_FALSE(name.empty());
  const std::string broken = write_temp_file("nodep.json", j.dump());
  const CommandResult r = mpirun(2, {"execute", "--plan", broken, "--steps", "1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("integrity check failed"));
  EXPECT_THAT(r.err, HasSubstr("'" + name + "'"));
  EXPECT_THAT(r.err, HasSubstr("read before anything wrote it"));
}

TEST(ExecuteCpuErrors, OverlappingBuffersAreRefusedByTheValidator) {
  const std::string plan = make_plan(2, {}, "overlap_plan.json");
  std::ifstream in(plan);
  nlohmann::json j = nlohmann::json::parse(in);
  nlohmann::json* first = nullptr;
  for (auto& b : j["buffers"]) {
    if (b["persistent"].get<bool>()) continue;
    if (first == nullptr) {
      first = &b;
    } else if (b["live"][0] < (*first)["live"][1] && (*first)["live"][0] < b["live"][1]) {
      b["offset"] = (*first)["offset"];
      break;
    }
  }
  const std::string broken = write_temp_file("overlap.json", j.dump());
  const CommandResult r = mpirun(2, {"execute", "--plan", broken, "--steps", "1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("overlapping_buffers"));
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// What crashed execute in issue 33's campaign is one clear error, said once by rank 0:
// a buffer of 2^63 - 1 bytes (SIGSEGV), an op naming segment 999 (SIGSEGV/SIGBUS), a
// [2^40, 2^40, 2^40] matmul (bad_alloc).
TEST(ExecuteCpuErrors, PlansThatCrashedAreOneClearError) {
  const nlohmann::json base = read_json(make_plan(2, {}, "hostile_base.json"));
  struct Mutation {
    std::string what;
    std::function<void(nlohmann::json&)> mutate;
    std::string error;
  };
  const int64_t d = int64_t{1} << 40;
  const std::vector<Mutation> cases = {
      {"huge buffer",
       [](nlohmann::json& j) { j["buffers"][0]["bytes"] = std::numeric_limits<int64_t>::max(); },
       "out_of_range: invalid plan: buffer 0"},
      {"segment 999",
       [](nlohmann::json& j) {
         for (auto& op : j["ops"])
           if (op["kind"] == "forward") {
             op["segment"] = 999;
             break;
           }
       },
       "bad_reference: invalid plan: op"},
      {"huge matmul",
       [&](nlohmann::json& j) {
         j["segments"][1]["gemms"][0] = {d, d, d};
       },
       "out_of_range: invalid plan: segment 1"},
  };
  for (const Mutation& c : cases) {
    nlohmann::json j = base;
    c.mutate(j);
    const std::string path = write_temp_file("hostile.json", j.dump());
    const CommandResult r = mpirun(2, {"execute", "--plan", path, "--steps", "1"});
    EXPECT_EQ(r.exit_code, 1) << c.what << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.error)) << c.what;
    // Rank 0 alone says it.
    EXPECT_EQ(r.err.find("shardplan: error"), r.err.rfind("shardplan: error")) << r.err;
  }
}

// A plan every rank fails to read is said once, by rank 0, after the others wait for it:
// a rank that exited first made mpirun end rank 0 before it spoke (no message at all).
TEST(ExecuteCpuErrors, AnUnreadablePlanIsSaidOnceByRankZero) {
  nlohmann::json j = read_json(make_plan(4, {}, "unreadable_base.json"));
  j.erase("cluster");
  const std::string path = write_temp_file("unreadable.json", j.dump());
  for (int attempt = 0; attempt < 3; ++attempt) {
    const CommandResult r = mpirun(4, {"execute", "--plan", path, "--steps", "1"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("unreadable.json: /cluster: required field is missing"));
    EXPECT_EQ(r.err.find("shardplan: error"), r.err.rfind("shardplan: error")) << r.err;
  }
  const CommandResult flags = mpirun(2, {"execute", "--plan", path, "--steps", "0"});
  EXPECT_EQ(flags.exit_code, 1);
  EXPECT_THAT(flags.err, HasSubstr("--steps: "));
  EXPECT_EQ(flags.err.find("shardplan: error"), flags.err.rfind("shardplan: error")) << flags.err;
}

// Matmuls the CPU backend would run for hours are refused before anything runs, with
// the scale that fits (a real model at --compute-scale 1 used to run into the watchdog,
// which then blamed another rank).
TEST(ExecuteCpuErrors, MatmulsBeyondTheCpuBackendAreRefusedWithTheScaleThatFits) {
  const std::string plan = make_plan(2, {"seq_len=8192"}, "big_gemms.json", "llama3-8b");
  const CommandResult r =
      mpirun(2, {"execute", "--plan", plan, "--compute-scale", "1", "--steps", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--compute-scale: at 1 the CPU backend would run"));
  EXPECT_THAT(r.err, HasSubstr("FLOPs of matmuls per step (its limit: 1e+12"));
  EXPECT_THAT(r.err, HasSubstr("fits"));
  // Rank 0 alone says it.
  EXPECT_EQ(r.err.find("shardplan: error"), r.err.rfind("shardplan: error")) << r.err;
}

// The CPU backend hands a collective's buffers to MPI whole, with int counts: a valid
// plan with a 2 GiB gathered buffer is refused up front, by rank 0, naming the buffer
// (its count wrapped negative in MPI).
TEST(ExecuteCpuErrors, ACollectiveBufferPastMpisIntCountsIsRefused) {
  nlohmann::json j = read_json(make_plan(2, {}, "mpi_int_base.json"));
  int64_t id = -1;
  for (const auto& op : j["ops"])
    if (op["kind"] == "all_gather") {
      id = op["reads"][0].get<int64_t>();
      break;
    }
  ASSERT_GE(id, 0);
  j["buffers"][static_cast<std::size_t>(id)]["bytes"] = int64_t{1} << 31;
  const std::string path = write_temp_file("mpi_int.json", j.dump());
  const CommandResult r = mpirun(2, {"execute", "--plan", path, "--steps", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("/buffers/" + std::to_string(id) + "/bytes: op "));
  EXPECT_THAT(r.err, HasSubstr("the CPU backend's MPI calls count in int"));
  EXPECT_EQ(r.err.find("shardplan: error"), r.err.rfind("shardplan: error")) << r.err;
}

// --json has no MFU on the CPU backend (its step is no GPU's), null with the reason
// rather than a 0.0 that reads as measured, and the plan's config with its mesh; the
// text report's config line names tp and cp.
TEST(ExecuteCpuReport, NoMfuButWhyAndTheWholeMesh) {
  const std::string plan = make_plan(4, {"tp=2", "cp=2", "seq_len=512"}, "report_plan.json");
  CommandResult r = mpirun(4, {"execute", "--plan", plan, "--steps", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j.at("summary").at("mfu").is_null()) << j.dump(1);
  EXPECT_THAT(j.at("mfu_note").get<std::string>(), HasSubstr("CPU backend"));
  EXPECT_EQ(j.at("config").at("tp"), 2);
  EXPECT_EQ(j.at("config").at("cp"), 2);
  r = mpirun(4, {"execute", "--plan", plan, "--steps", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("config: "));
  EXPECT_THAT(r.out, HasSubstr(" tp2"));
  EXPECT_THAT(r.out, HasSubstr(" cp2"));
  EXPECT_THAT(r.out, HasSubstr("MFU: none (the CPU backend"));
}

TEST(ExecuteCpuErrors, WorldSizeMustMatchThePlan) {
  const std::string plan = make_plan(2, {}, "size_plan.json");
  const CommandResult r = mpirun(3, {"execute", "--plan", plan});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("the plan is for 2 GPUs but 3 ranks were started"));
}

// Without a device the CUDA backend says so; with one (a GPU machine) it runs the plan
// and reports the measured step.
TEST(ExecuteCuda, RunsOnADeviceOrSaysThereIsNone) {
  const std::string plan = make_plan(1, {}, "cuda_plan.json");
  const CommandResult r =
      run_shardplan({"execute", "--plan", plan, "--backend", "cuda", "--steps", "1", "--json"});
  if (probe_cuda().device_count == 0) {
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.err, HasSubstr("no CUDA device"));
    return;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("backend"), "cuda");
  EXPECT_GT(j.at("summary").at("step_seconds").get<double>(), 0);
  // The measured step against the plan's GPU (dgx-h100's dense BF16 peak), as simulate.
  const double mfu = j.at("summary").at("mfu").get<double>();
  EXPECT_GT(mfu, 0);
  EXPECT_LT(mfu, 1);
}

// Under mpirun every rank that cannot start says so with its rank, and the job ends
// (MPI_Abort) instead of leaving the others waiting in MPI.
TEST(ExecuteCuda, EveryRankWithoutADeviceEndsTheJob) {
  if (probe_cuda().device_count > 0) GTEST_SKIP() << "a CUDA device is present";
  const std::string plan = make_plan(2, {}, "cuda_plan2.json");
  const CommandResult r = mpirun(2, {"execute", "--plan", plan, "--backend", "cuda"});
  EXPECT_NE(r.exit_code, 0);
  // Whichever rank fails first ends the job, so either may be the one that speaks.
  EXPECT_THAT(r.err, ::testing::AnyOf(HasSubstr("(rank 0): --backend cuda: no CUDA device"),
                                      HasSubstr("(rank 1): --backend cuda: no CUDA device")));
}

}  // namespace
}  // namespace shardplan::testing
