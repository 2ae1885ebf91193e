#include "pool/synthetic.h"

#include <algorithm>
#include <array>

#include "pool/placement.h"

namespace shardplan {
namespace {

// Reproducible draws: SplitMix64 (pool/placement.h) with the draws a trace needs.
struct Rng {
  pool::SplitMix64 mix;
  int64_t below(int64_t n) { return static_cast<int64_t>(mix.below(static_cast<uint64_t>(n))); }
  bool chance(int64_t one_in) { return below(one_in) == 0; }
  template <typename T, std::size_t N>
  T pick(const std::array<T, N>& values) {
    return values[static_cast<std::size_t>(below(static_cast<int64_t>(N)))];
  }
};

constexpr int64_t kBf16 = 2;
constexpr int64_t kFp32 = 4;
constexpr int64_t kLossChunks = 8;

struct Model {
  int64_t hidden, ffn, tokens, vocab, heads;
  int layers;
};

// One op of a layer's forward pass.
struct Op {
  int64_t output = 0;   // bytes written
  bool saved = false;   // read again by the backward
  int64_t weight = 0;   // bytes of weights gathered for it (0: none)
  int64_t extra = 0;    // a second, small saved output (softmax statistics)
  std::size_t out = 0;  // the output's request, once emitted
  std::size_t extra_out = 0;
};

int64_t round_to(int64_t value, int64_t multiple) {
  return std::max(multiple, (value + multiple / 2) / multiple * multiple);
}

// The end of a gradient accumulator emitted in a micro-batch: the optimizer's update of
// its weight, at the end of the step, sets it.
constexpr int64_t kUntilOptimizer = INT64_MAX;

class Builder {
 public:
  Builder(const Model& model, const SyntheticTraceOptions& options)
      : m_(model), experts_(options.experts), compiled_(options.compiled_step) {
    rng_.mix.state = options.seed;
  }

  // Micro-batches one after the other (FSDP's gradient accumulation), or, `pipelined`,
  // in a one-forward-one-backward steady state (a pipeline stage's 1F1B): the forward of
  // micro-batch k + 1 runs op for op alternating with the backward of k, so saved
  // activations of two micro-batches come and go at once.
  std::vector<PoolRequest> run(int micro_batches, bool pipelined) {
    std::vector<PoolRequest> all;
    int64_t start = 0;
    for (int k = 0; k < micro_batches; ++k) {
      out_.clear();
      now_ = 0;
      first_micro_batch_ = k == 0;
      const int64_t forward_ops = micro_batch();
      for (PoolRequest r : out_) {
        r.begin = start + 2 * r.begin + k % 2;
        if (r.end != kUntilOptimizer) r.end = start + 2 * r.end + k % 2;
        all.push_back(r);
      }
      start += 2 * (pipelined ? forward_ops : now_);
    }
    if (compiled_) {
      // After the last op of every micro-batch (pipelined, the last backward runs past
      // `start`).
      int64_t last = start;
      for (const PoolRequest& r : all)
        last = std::max(last, r.end == kUntilOptimizer ? r.begin : r.end);
      optimizer_step(all, last + 2);
    }
    return all;
  }

 private:
  std::size_t emit(int64_t bytes, int64_t begin, int64_t end) {
    out_.push_back({.bytes = bytes, .begin = std::max<int64_t>(0, begin), .end = end});
    return out_.size() - 1;
  }

  // A workspace for half the ops, of an irregular size below the op's output; in a
  // compiled step also the small results a graph compiler keeps apart (shapes, scalars,
  // norms' statistics, masks: the 4-byte median of the SOMAS traces), up to three, each
  // read by the next op or two.
  void workspace(int64_t output) {
    if (rng_.chance(2))
      emit(round_to(output * (1 + rng_.below(7)) / 8 + rng_.below(4096), 256), now_, now_ + 1);
    if (!compiled_) return;
    for (int64_t k = rng_.below(4); k > 0; --k) {
      const int64_t bytes = rng_.chance(2) ? 4 : 4 * (1 + rng_.below(m_.tokens * 4));
      emit(bytes, now_, now_ + 1 + rng_.below(2));
    }
  }

  // The end of a compiled step: each weight's gradient accumulator is read by its update
  // (one op per weight, in the order the backward produced them) with an update temporary
  // as large, then freed. Every accumulator ends here, so the whole step is one window.
  void optimizer_step(std::vector<PoolRequest>& all, int64_t start) {
    int64_t now = start;
    const std::size_t emitted = all.size();
    for (std::size_t i = 0; i < emitted; ++i) {
      if (all[i].end != kUntilOptimizer) continue;
      all[i].end = now + 1;
      all.push_back({.bytes = all[i].bytes, .begin = now, .end = now + 1});
      ++now;
    }
    // Buffers the whole step reads (the batch's token ids and labels, the loss scale).
    for (const int64_t bytes : {m_.tokens * 8, m_.tokens * 8, int64_t{4}})
      all.push_back({.bytes = bytes, .begin = 0, .end = now + 1});
  }

  void forward_op(Op& op) {
    if (op.weight > 0) emit(op.weight, now_ - 1, now_ + 1);  // prefetched one op ahead
    workspace(op.output);
    if (op.saved) {
      op.out = emit(op.output, now_, 0);  // ends in the backward
      if (op.extra > 0) op.extra_out = emit(op.extra, now_, 0);
    } else if (!rng_.chance(10)) {  // else fused into the next op
      emit(op.output, now_, now_ + 2 + rng_.below(3));
    }
    ++now_;
  }

  void backward_op(const Op& op) {
    if (op.weight > 0) {
      emit(op.weight, now_ - 1, now_ + 1);
      if (compiled_ && first_micro_batch_) {
        emit(op.weight, now_, kUntilOptimizer);  // the gradient accumulator
      } else {
        // Until its reduce-scatter, or, compiled, until added to the accumulator.
        emit(op.weight, now_, now_ + 2 + rng_.below(4));
      }
    }
    workspace(op.output);
    emit(op.output, now_, now_ + 2 + rng_.below(2));  // the input's gradient
    if (op.saved) {
      out_[op.out].end = now_ + 1;
      if (op.extra > 0) out_[op.extra_out].end = now_ + 1;
    }
    ++now_;
  }

  std::vector<Op> layer_ops() {
    const int64_t t = m_.tokens, h = m_.hidden, f = m_.ffn;
    std::vector<Op> ops = {
        {.output = t * h * kBf16, .saved = true},                                   // input norm
        {.output = t * 3 * h * kBf16, .saved = true, .weight = 3 * h * h * kBf16},  // qkv
        {.output = t * h * kBf16, .saved = true, .extra = m_.heads * t * kFp32},    // attention
        {.output = t * h * kBf16, .weight = h * h * kBf16},                         // projection
        {.output = t * h * kBf16, .saved = true},                                   // residual
        {.output = t * h * kBf16, .saved = true},                                   // norm
    };
    if (experts_ == 0) {
      ops.push_back({.output = t * 2 * f * kBf16, .saved = true, .weight = 2 * f * h * kBf16});
      ops.push_back({.output = t * f * kBf16, .saved = true});            // SwiGLU
      ops.push_back({.output = t * h * kBf16, .weight = f * h * kBf16});  // down projection
    } else {
      ops.push_back({.output = t * experts_ * kFp32, .saved = true});  // router logits
      // Top-2 routing with a skewed load: expert e gets a weight in 1..64 (squares of
      // 1..8), the token slots split in proportion.
      std::vector<int64_t> weight(static_cast<std::size_t>(experts_));
      int64_t sum = 0;
      for (int64_t& w : weight) sum += w = (1 + rng_.below(8)) * (1 + rng_.below(8));
      for (int64_t w : weight) {
        const int64_t tokens = std::max<int64_t>(1, 2 * t * w / sum);
        ops.push_back({.output = tokens * h * kBf16, .saved = true});  // dispatched input
        ops.push_back(
            {.output = tokens * 2 * f * kBf16, .saved = true, .weight = 2 * f * h * kBf16});
        ops.push_back({.output = tokens * f * kBf16, .saved = true});
        ops.push_back({.output = tokens * h * kBf16, .weight = f * h * kBf16});
      }
    }
    ops.push_back({.output = t * h * kBf16});  // residual: the next layer's input
    return ops;
  }

  // Returns the number of forward ops.
  int64_t micro_batch() {
    std::vector<std::vector<Op>> layers;
    emit(m_.tokens * m_.hidden * kBf16, now_, now_ + 2);  // embedding
    ++now_;
    for (int l = 0; l < m_.layers; ++l) {
      layers.push_back(layer_ops());
      for (Op& op : layers.back()) forward_op(op);
    }
    // The loss over the vocabulary in chunks of tokens (as Liger's or Megatron's fused
    // cross entropy), so the logits never dominate: each chunk's logits live until their
    // gradient is taken.
    std::vector<Op> loss(static_cast<std::size_t>(kLossChunks),
                         {.output = m_.tokens / kLossChunks * m_.vocab * kBf16});
    for (Op& chunk : loss) {
      chunk.saved = true;
      forward_op(chunk);
    }
    const int64_t forward_ops = now_;
    for (auto chunk = loss.rbegin(); chunk != loss.rend(); ++chunk) backward_op(*chunk);
    for (auto layer = layers.rbegin(); layer != layers.rend(); ++layer) {
      for (auto op = layer->rbegin(); op != layer->rend(); ++op) backward_op(*op);
    }
    ++now_;
    return forward_ops;
  }

  Model m_;
  int experts_;
  bool compiled_;
  bool first_micro_batch_ = true;
  Rng rng_{};
  int64_t now_ = 0;
  std::vector<PoolRequest> out_;
};

Model pick_model(uint64_t seed, int experts) {
  Rng rng{{seed ^ 0x5eed5eed5eed5eedULL}};
  Model m{};
  m.hidden = rng.pick(std::array<int64_t, 5>{2048, 3072, 4096, 5120, 8192});
  // SwiGLU's 8/3 expansion rounded to 256 (LLaMA), or a plain 4x (GPT); experts are
  // narrower (Mixtral 14336 for 4096, DeepSeek-MoE much less).
  m.ffn = experts > 0 ? round_to(m.hidden * (1 + rng.below(3)) / 2, 256)
                      : (rng.chance(2) ? round_to(m.hidden * 8 / 3, 256) : 4 * m.hidden);
  m.tokens = rng.pick(std::array<int64_t, 4>{1024, 2048, 4096, 8192});
  m.vocab = rng.pick(std::array<int64_t, 4>{32000, 50257, 128256, 151936});
  m.heads = m.hidden / 128;
  m.layers = experts > 0 ? static_cast<int>(rng.pick(std::array<int64_t, 3>{16, 24, 32}))
                         : static_cast<int>(rng.pick(std::array<int64_t, 5>{24, 32, 40, 48, 80}));
  return m;
}

}  // namespace

std::vector<PoolRequest> synthetic_training_trace(const SyntheticTraceOptions& options) {
  Model model = pick_model(options.seed, options.experts);
  const int64_t wanted = std::max<int64_t>(1, options.buffers);
  // One micro-batch first, to learn how many buffers the model gives; fewer layers when
  // that is already too many, more micro-batches when too few.
  const auto count = [&](int micro_batches) {
    return static_cast<int64_t>(Builder(model, options).run(micro_batches, false).size());
  };
  int micro_batches = options.micro_batches;
  if (micro_batches <= 0) {
    const int64_t one = count(1);
    if (one > wanted) {
      model.layers = static_cast<int>(std::max<int64_t>(1, model.layers * wanted / one));
      micro_batches = 1;
    } else {
      micro_batches = static_cast<int>(std::max<int64_t>(1, (wanted + one / 2) / one));
    }
  }
  return Builder(model, options).run(micro_batches, options.pipelined);
}

}  // namespace shardplan
