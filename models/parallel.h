#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// How context parallelism exchanges keys and values (Megatron's --cp-comm-type, Transformer
// Engine's cp_comm_type): p2p, ring attention (cp − 1 send/recv steps, each overlapped with
// attention on the chunk already held); all_gather, one all-gather of K and V before
// attention; a2a, Ulysses-style all-to-alls that trade the sequence split for a head split
// around attention.
enum class CpComm { p2p, all_gather, a2a };

std::string_view cp_comm_name(CpComm c);
std::optional<CpComm> parse_cp_comm(std::string_view text);
std::vector<std::string> cp_comm_names();

// How a mixture-of-experts layer moves its tokens to the experts (Megatron's
// --moe-token-dispatcher-type, megatron/core/transformer/moe/token_dispatcher.py):
// alltoall, each routed copy of a token sent to its expert's rank over the ep group
// (MoEAlltoAllTokenDispatcher); allgather, every token gathered to every rank of the
// ep × etp group, each keeping what its experts need (MoEAllGatherTokenDispatcher);
// deepep, hybridep: the flex dispatcher's kernels (MoEFlexTokenDispatcher), which send a
// token once to each rank holding any of its experts and permute it there.
enum class MoeDispatcher { alltoall, allgather, deepep, hybridep };

// The flex dispatcher (DeepEP, HybridEP): one copy of a token per destination rank.
inline bool deduplicates_tokens(MoeDispatcher d) {
  return d == MoeDispatcher::deepep || d == MoeDispatcher::hybridep;
}

std::string_view moe_dispatcher_name(MoeDispatcher d);
std::optional<MoeDispatcher> parse_moe_dispatcher(std::string_view text);
std::vector<std::string> moe_dispatcher_names();

// The model-parallel dimensions of the device mesh that change what one GPU holds and
// runs: tensor parallelism splits every layer's weights (and, with sequence parallelism,
// the activations outside them) over `tp` ranks; context parallelism splits each
// sequence over `cp` ranks.
struct ModelParallel {
  int64_t tp = 1;
  bool sequence_parallel = false;
  int64_t cp = 1;
  CpComm cp_comm = CpComm::p2p;
  // The cross entropy on each rank's vocabulary shard (Megatron's VocabParallelCrossEntropy,
  // torchtitan's loss_parallel); false: the logits are all-gathered to every tensor-parallel
  // rank first (PyTorch's ColwiseParallel output head with output_layouts=Replicate).
  bool vocab_parallel_loss = true;
  // The embedding split over the vocabulary (Megatron's VocabParallelEmbedding, torchtitan's
  // RowwiseParallel embedding); false: replicated on every tensor-parallel rank, each
  // looking up the whole sequence (KempnerForge, kempnerforge/distributed/tensor_parallel.py).
  bool vocab_parallel_embedding = true;
  // Mixture of experts: the experts split over `ep` ranks (each holding num_experts / ep
  // whole experts), each expert split over `etp` ranks as tensor parallelism splits an MLP.
  int64_t ep = 1;
  int64_t etp = 1;
  MoeDispatcher moe_dispatcher = MoeDispatcher::allgather;
  // The busiest expert's tokens ÷ the mean (max/mean tokens per expert), and the capacity
  // factor that caps it (0: dropless, no cap). docs/model.md "Mixture of experts".
  double moe_imbalance = 1.0;
  double moe_capacity_factor = 0;

  bool operator==(const ModelParallel&) const = default;

  bool trivial() const {
    return tp == 1 && cp == 1 && ep == 1 && etp == 1 && moe_imbalance == 1.0 &&
           moe_capacity_factor == 0;
  }
};

// The mesh axis a module's collective runs over: ep, the expert-parallel group (a MoE
// layer's all-to-all dispatch and combine); etp, the expert-tensor-parallel group;
// ep_etp, the two flattened (the allgather dispatcher's group).
enum class MeshAxis { tp, cp, ep, etp, ep_etp };
inline constexpr std::size_t kNumMeshAxes = 5;
// What a module's collective does, in nccl-tests terms.
enum class CommKind { all_gather, reduce_scatter, all_reduce, send_recv, all_to_all };
enum class CommPhase { forward, backward };

std::string_view mesh_axis_name(MeshAxis a);

}  // namespace shardplan
