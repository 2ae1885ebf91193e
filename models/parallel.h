#pragma once

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

  bool trivial() const { return tp == 1 && cp == 1; }
};

// The mesh axis a module's collective runs over.
enum class MeshAxis { tp, cp };
// What a module's collective does, in nccl-tests terms.
enum class CommKind { all_gather, reduce_scatter, all_reduce, send_recv, all_to_all };
enum class CommPhase { forward, backward };

std::string_view mesh_axis_name(MeshAxis a);

}  // namespace shardplan
