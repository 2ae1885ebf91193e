// One rank of a tensor- and context-parallel mesh against closed forms: Korthikanti et
// al. 2022 (arXiv 2205.05198) Table 2 for activations with TP and TP+SP, parameters per
// TP rank worked from the architecture, FLOPs shared by tp × cp ranks, Megatron's
// vocabulary padding, and the collectives each block runs.
#include <gtest/gtest.h>

#include "models/module_cost.h"
#include "models/transformer_builder.h"
#include "models/zoo.h"
#include "tests/models/korthikanti_gpt.h"

namespace shardplan {
namespace {

// Korthikanti's GPT layer, without flash attention (its s² terms are the paper's).
TransformerArch gpt() {
  return testing::korthikanti_gpt(false);
}

double layer_bytes(const ModelParallel& p, const BatchShape& shape, Recompute recompute) {
  const ModelSpec model = build_transformer(gpt(), "gpt", "test", p);
  const Module* layer = find_module(model.root, "layers.0");
  EXPECT_NE(layer, nullptr);
  return saved_activation_bytes(*layer, shape, recompute);
}

TEST(ParallelModel, ActivationsWithTensorAndSequenceParallelismMatchKorthikanti) {
  const double s = 2048, b = 2, h = 1024, a = 16;
  const BatchShape shape{.micro_batch = 2, .seq_len = 2048, .activation_bytes = 2};
  // Beside the paper's terms: the LayerNorms' fp32 mean and rstd, 16 bytes per token, in
  // the sequence-parallel region.
  for (const double t : {1.0, 2.0, 4.0, 8.0}) {
    const auto tp = static_cast<int64_t>(t);
    // TP + SP: sbh(34/t + 5as/(ht)) (Korthikanti Table 2, "tensor + sequence parallel").
    const double sp = s * b * h * (34.0 / t + 5.0 * a * s / (h * t)) + 16.0 * s * b / t;
    EXPECT_DOUBLE_EQ(layer_bytes({.tp = tp, .sequence_parallel = tp > 1}, shape, Recompute::none),
                     sp)
        << "tp " << tp;
    // TP alone: sbh(10 + 24/t + 5as/(ht)): the norms' inputs, the inputs of the first
    // linear of each block and the dropout masks stay whole.
    const double tp_only = s * b * h * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)) + 16.0 * s * b;
    EXPECT_DOUBLE_EQ(layer_bytes({.tp = tp}, shape, Recompute::none), tp_only) << "tp " << tp;
    // Selective recompute drops the attention term: 34·sbh/t with SP (paper, Table 2).
    EXPECT_DOUBLE_EQ(
        layer_bytes({.tp = tp, .sequence_parallel = tp > 1}, shape, Recompute::selective),
        s * b * h * 34.0 / t + 16.0 * s * b / t);
    // Full recompute keeps the layer input, the sequence-parallel shard: 2sbh/t.
    EXPECT_DOUBLE_EQ(layer_bytes({.tp = tp, .sequence_parallel = tp > 1}, shape, Recompute::full),
                     2.0 * s * b * h / t);
  }
}

TEST(ParallelModel, ContextParallelismSplitsTheSequenceButNotTheKeys) {
  const double s = 4096, b = 1, h = 1024, a = 16, t = 2;
  for (const int64_t cp : {2, 4}) {
    const BatchShape shape{
        .micro_batch = 1, .seq_len = 4096, .activation_bytes = 2, .context_parallel = cp};
    const double local = s / static_cast<double>(cp);
    // Each rank keeps the per-token terms of its s/cp tokens, and the attention
    // probabilities of its s/cp queries over all s keys.
    const double expected =
        local * b * h * 34.0 / t + 5.0 * a * local * s * b / t + 16.0 * local * b / t;
    EXPECT_DOUBLE_EQ(
        layer_bytes({.tp = 2, .sequence_parallel = true, .cp = cp}, shape, Recompute::none),
        expected)
        << "cp " << cp;
  }
}

TEST(ParallelModel, ParametersPerTensorParallelRankFromTheArchitecture) {
  const ModelSpec whole = load_model("llama3-8b");
  const double h = 4096, q = 4096, kv = 1024, f = 14336, layers = 32;
  for (const int64_t tp : {1, 2, 4, 8}) {
    const auto t = static_cast<double>(tp);
    const ModelSpec rank = parallel_model(whole, {.tp = tp, .sequence_parallel = tp > 1});
    // Vocabulary rows padded to 128·tp (Megatron), split over tp; q, k, v, gate, up split
    // by output, o and down by input; norms whole on every rank.
    const auto vocab = static_cast<double>(padded_vocab_size(128256, tp));
    const double per_layer = (h * q + 2 * h * kv + q * h + 3 * h * f) / t + 2 * h;
    const double expected = 2 * vocab * h / t + layers * per_layer + h;
    EXPECT_EQ(static_cast<double>(parameter_count(rank.root)), expected) << "tp " << tp;
  }
}

TEST(ParallelModel, MegatronPadsTheVocabularyTo128TimesTp) {
  EXPECT_EQ(padded_vocab_size(128256, 1), 128256);  // unpadded without TP
  EXPECT_EQ(padded_vocab_size(128256, 2), 128256);  // 128256 = 501 × 256
  EXPECT_EQ(padded_vocab_size(128256, 4), 128512);
  EXPECT_EQ(padded_vocab_size(128256, 8), 129024);
  EXPECT_EQ(padded_vocab_size(50257, 2), 50432);  // GPT-2: 197 × 256
}

// The loss on each rank's vocabulary shard (Megatron, torchtitan's loss_parallel) keeps
// 4·V/t + 8 bytes per token; with the logits all-gathered first (PyTorch's ColwiseParallel
// head with Replicate output, as KempnerForge runs it) 4·V + 8, one forward all-gather of
// V bf16 elements per token on the head, and no vocabulary all-reduces.
TEST(ParallelModel, GatheredLogitsKeepTheWholeVocabulary) {
  const ModelSpec whole = load_model("llama3-8b");
  const double vocab = 128256, tokens = 4096;
  const BatchShape shape{.micro_batch = 1, .seq_len = 4096};
  for (const bool vocab_parallel : {true, false}) {
    const ModelSpec rank = parallel_model(
        whole, {.tp = 2, .sequence_parallel = true, .vocab_parallel_loss = vocab_parallel});
    const Module* loss = find_module(rank.root, "loss");
    const Module* head = find_module(rank.root, "lm_head");
    ASSERT_NE(loss, nullptr);
    ASSERT_NE(head, nullptr);
    const double kept_vocab = vocab_parallel ? vocab / 2 : vocab;
    EXPECT_DOUBLE_EQ(saved_activation_bytes(*loss, shape, Recompute::none),
                     (4.0 * kept_vocab + 8.0) * tokens);
    int64_t logit_gathers = 0;
    for (const ModuleComm& c : head->cost.comms) {
      if (c.phase == CommPhase::forward && c.kind == CommKind::all_gather &&
          c.per_token.elements == vocab) {
        ++logit_gathers;
        EXPECT_DOUBLE_EQ(comm_bytes(*head, c, shape), 2.0 * vocab * tokens);
      }
    }
    EXPECT_EQ(logit_gathers, vocab_parallel ? 0 : 1);
    EXPECT_EQ(loss->cost.comms.empty(), !vocab_parallel);
  }
}

// A replicated embedding (KempnerForge's TP plan) holds all V' rows on every TP rank, runs
// no forward collective (each rank looks up every token; the sequence-parallel norm
// slices), and all-gathers the output's gradient in backward; the vocabulary-parallel one
// holds V'/t rows and reduce-scatters its partial sums in forward.
TEST(ParallelModel, ReplicatedEmbeddingKeepsEveryRowOnEveryTpRank) {
  const ModelSpec whole = load_model("llama3-8b");
  const BatchShape shape{.micro_batch = 1, .seq_len = 4096};
  const int64_t padded = padded_vocab_size(128256, 4);
  for (const bool split : {true, false}) {
    const ModelSpec rank = parallel_model(
        whole, {.tp = 4, .sequence_parallel = true, .vocab_parallel_embedding = split});
    const Module* embed = find_module(rank.root, "embed_tokens");
    ASSERT_NE(embed, nullptr);
    ASSERT_EQ(embed->parameters.size(), 1u);
    EXPECT_EQ(embed->parameters[0].shape[0], split ? padded / 4 : padded);
    ASSERT_EQ(embed->cost.comms.size(), split ? 2u : 1u);
    const ModuleComm& first = embed->cost.comms[0];
    EXPECT_EQ(first.phase, split ? CommPhase::forward : CommPhase::backward);
    EXPECT_EQ(first.kind, split ? CommKind::reduce_scatter : CommKind::all_gather);
    EXPECT_DOUBLE_EQ(comm_bytes(*embed, first, shape), 2.0 * 4096 * 4096);
  }
}

TEST(ParallelModel, FlopsAreSharedByTheTpTimesCpRanks) {
  const ModelSpec whole = build_transformer(gpt(), "gpt", "test");
  const BatchShape full{.micro_batch = 2, .seq_len = 4096};
  for (const auto& [tp, cp] : {std::pair{2, 1}, {4, 2}, {8, 4}, {1, 2}}) {
    const ModelSpec rank = parallel_model(whole, {.tp = tp, .sequence_parallel = tp > 1, .cp = cp});
    const BatchShape local{.micro_batch = 2, .seq_len = 4096, .context_parallel = cp};
    const double ranks = static_cast<double>(tp * cp);
    // 51200 rows divide 128·tp, so no padding: exactly 1/(tp·cp) of every FLOP, causal
    // attention included (load-balanced chunks).
    EXPECT_DOUBLE_EQ(forward_flops(rank.root, local) * ranks, forward_flops(whole.root, full));
    EXPECT_DOUBLE_EQ(backward_flops(rank.root, local) * ranks, backward_flops(whole.root, full));
    EXPECT_DOUBLE_EQ(forward_flops_of_kind(rank.root, local, ComputeKind::attention) * ranks,
                     forward_flops_of_kind(whole.root, full, ComputeKind::attention));
  }
}

// Sums a module subtree's collectives of one phase and kind, in bytes per token.
double comm_bytes(const Module& m, CommPhase phase, CommKind kind, int64_t* count) {
  double total = 0;
  for_each_module(m, [&](const Module& x) {
    for (const ModuleComm& c : x.cost.comms) {
      if (c.phase != phase || c.kind != kind) continue;
      total += c.per_token.bytes(2) * static_cast<double>(c.count);
      *count += c.count;
    }
  });
  return total;
}

TEST(ParallelModel, EachLayerRunsTheCollectivesOfMegatronsTensorAndContextParallelism) {
  const ModelSpec whole = load_model("llama3-8b");
  const double h = 4096, kv = 1024;
  const ModelSpec rank = parallel_model(whole, {.tp = 4, .sequence_parallel = true, .cp = 2});
  const Module* layer = find_module(rank.root, "layers.3");
  ASSERT_NE(layer, nullptr);
  int64_t n = 0;
  // Sequence parallel: per block, forward gathers the input and reduce-scatters the
  // output (2h bytes per token each, bf16); backward gathers the output gradient and
  // re-gathers the input, and reduce-scatters the input gradient.
  EXPECT_DOUBLE_EQ(comm_bytes(*layer, CommPhase::forward, CommKind::all_gather, &n), 2 * 2 * h);
  EXPECT_EQ(n, 2);
  n = 0;
  EXPECT_DOUBLE_EQ(comm_bytes(*layer, CommPhase::forward, CommKind::reduce_scatter, &n), 2 * 2 * h);
  EXPECT_EQ(n, 2);
  n = 0;
  EXPECT_DOUBLE_EQ(comm_bytes(*layer, CommPhase::backward, CommKind::all_gather, &n), 4 * 2 * h);
  EXPECT_EQ(n, 4);
  n = 0;
  EXPECT_DOUBLE_EQ(comm_bytes(*layer, CommPhase::backward, CommKind::reduce_scatter, &n),
                   2 * 2 * h);
  EXPECT_EQ(n, 2);
  // Ring attention: cp − 1 = 1 step of this rank's K and V (kv / tp wide each) forward,
  // K, V and dK, dV backward.
  n = 0;
  EXPECT_DOUBLE_EQ(comm_bytes(*layer, CommPhase::forward, CommKind::send_recv, &n),
                   2.0 * 2 * kv / 4);
  EXPECT_EQ(n, 1);
  n = 0;
  EXPECT_DOUBLE_EQ(comm_bytes(*layer, CommPhase::backward, CommKind::send_recv, &n),
                   2.0 * 4 * kv / 4);
  EXPECT_EQ(n, 1);
  // Without sequence parallelism: one all-reduce per block each way.
  const ModelSpec plain = parallel_model(whole, {.tp = 4});
  n = 0;
  EXPECT_DOUBLE_EQ(comm_bytes(*find_module(plain.root, "layers.3"), CommPhase::forward,
                              CommKind::all_reduce, &n),
                   2 * 2 * h);
  EXPECT_EQ(n, 2);
  // Ulysses: all-to-all of Q, K, V before attention and of the output after.
  const ModelSpec a2a = parallel_model(whole, {.tp = 1, .cp = 4, .cp_comm = CpComm::a2a});
  n = 0;
  EXPECT_DOUBLE_EQ(
      comm_bytes(*find_module(a2a.root, "layers.3"), CommPhase::forward, CommKind::all_to_all, &n),
      2.0 * ((h + 2 * kv) + h));
  EXPECT_EQ(n, 2);
  // The whole model runs none.
  n = 0;
  EXPECT_EQ(comm_bytes(whole.root, CommPhase::forward, CommKind::all_gather, &n), 0.0);
}

}  // namespace
}  // namespace shardplan
