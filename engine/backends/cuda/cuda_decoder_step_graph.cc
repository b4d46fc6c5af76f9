// CudaDecoderStep's CUDA graphs of decode steps (step_graphs.h): staging the
// step's inputs, deferring its ops, and recording or replaying them.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/backends/cuda/cuda_decoder_step.h"
#include "engine/core/status_macros.h"
#include "engine/ops/cuda/embedding.h"
#include "spdlog/spdlog.h"

namespace vismoe::cuda {
namespace {

constexpr size_t kAlign = DeviceArena::kDefaultAlignment;
size_t Aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

bool CudaDecoderStep::GraphEligible(const StepInput& in) const {
  if (!ops_.graphs_enabled_ || ops_.timer_ != nullptr || !ops_.device_moe_ ||
      decode_act_ == nullptr || n_ > ops_.staging_.max_rows() || c_.longrope.has_value()) {
    return false;  // (LongRoPE's per-row scales are not staged)
  }
  if (n_ != static_cast<int64_t>(seq_rows_.size())) return false;  // decode: one row each
  if (in.visual_embeds != nullptr || !in.visual_rows.empty() || !in.deepstack.empty()) {
    return false;
  }
  for (const DeviceKvPool* p : pools_) {
    if (p != pools_[0]) return false;
  }
  return static_cast<int64_t>(in.positions.size()) == 3 * n_;
}

// Layout: positions int64 [3][n] | ids [n] | cache lengths [S][layers] |
// block tables [S][pool blocks], each part aligned. The same for every step
// of the same key, so a graph's copy and kernels read the same addresses.
absl::Status CudaDecoderStep::StageInputs(const StepInput& in) {
  const int64_t seqs = static_cast<int64_t>(caches_.size());
  const int layers = c_.num_hidden_layers;
  const int64_t stride = pools_[0]->total_blocks();
  const size_t pos_bytes = Aligned(3 * n_ * sizeof(int64_t));
  const size_t ids_bytes = Aligned(n_ * sizeof(int32_t));
  const size_t kv_bytes = Aligned(seqs * layers * sizeof(int32_t));
  const size_t bytes = pos_bytes + ids_bytes + kv_bytes + Aligned(seqs * stride * sizeof(int32_t));
  if (ops_.step_inputs_.size() < bytes) {
    // A new host block: graphs made over the old one copy from it.
    ops_.graphs_.Clear();
    ops_.step_inputs_ = PinnedHostBuffer();
    VISMOE_ASSIGN_OR_RETURN(ops_.step_inputs_,
                            PinnedHostBuffer::Allocate(std::max<size_t>(bytes, 64 << 10)));
  }
  char* host = static_cast<char*>(ops_.step_inputs_.data());
  std::memcpy(host, in.positions.data(), 3 * n_ * sizeof(int64_t));
  auto* ids = reinterpret_cast<int32_t*>(host + pos_bytes);
  for (int64_t i = 0; i < n_; ++i) ids[i] = in.tokens[i];
  auto* kv = reinterpret_cast<int32_t*>(host + pos_bytes + ids_bytes);
  auto* tables = reinterpret_cast<int32_t*>(host + pos_bytes + ids_bytes + kv_bytes);
  for (int64_t s = 0; s < seqs; ++s) {
    for (int l = 0; l < layers; ++l) {
      kv[s * layers + l] = static_cast<int32_t>(caches_[s]->layer_length(l));
    }
    const std::vector<int32_t>& blocks = caches_[s]->blocks();
    if (static_cast<int64_t>(blocks.size()) > stride) {
      return absl::InternalError("a cache holds more blocks than its pool");
    }
    int32_t* t = tables + s * stride;
    std::copy(blocks.begin(), blocks.end(), t);
    std::fill(t + blocks.size(), t + stride, 0);
  }
  VISMOE_ASSIGN_OR_RETURN(void* dev, scratch().Allocate(bytes));
  char* d = static_cast<char*>(dev);
  staged_ = Staged{host, dev, bytes, reinterpret_cast<int32_t*>(d + pos_bytes),
                   reinterpret_cast<int32_t*>(d + pos_bytes + ids_bytes)};
  positions_ = reinterpret_cast<int64_t*>(d);
  tables_.clear();
  auto* dev_tables = reinterpret_cast<int32_t*>(d + pos_bytes + ids_bytes + kv_bytes);
  for (int64_t s = 0; s < seqs; ++s) tables_.push_back(dev_tables + s * stride);
  key_ = StepGraphKey{n_, pools_[0], stride};
  replay_ = ops_.graphs_.Find(key_);
  mode_ = replay_ != nullptr ? Mode::kReplay : Mode::kRecord;
  return absl::OkStatus();
}

absl::Status CudaDecoderStep::BeginNow() {
  // One copy of the page-locked block: a node of the graph, like the rest.
  VISMOE_RETURN_IF_ERROR(CopyToDeviceAsync(staged_.device, staged_.host, staged_.bytes, st_));
  return EmbeddingGather(ops_.embed_, c_.vocab_size, static_cast<int>(h_), staged_.ids, n_, hs_,
                         st_);
}

absl::Status CudaDecoderStep::Run(const StepOp& op) {
  if (mode_ == Mode::kRecord) {
    deferred_.push_back(op);
    return absl::OkStatus();
  }
  if (mode_ == Mode::kReplay) {
    if (deferred_.size() < replay_->ops.size() && replay_->ops[deferred_.size()] == op) {
      deferred_.push_back(op);
      return absl::OkStatus();
    }
    // Another step than recorded: launch op by op; the next one records.
    ops_.graphs_.Erase(key_);
    replay_ = nullptr;
    VISMOE_RETURN_IF_ERROR(RunDeferredNow());
  }
  return Execute(op);
}

absl::Status CudaDecoderStep::Execute(const StepOp& op) {
  switch (op.kind) {
    case StepOp::Kind::kBegin:
      return BeginNow();
    case StepOp::Kind::kNorm:
      return NormNow(op.layer, static_cast<NormSite>(op.arg));
    case StepOp::Kind::kAttention:
      return AttentionNow(op.layer);
    case StepOp::Kind::kDeviceMoe:
      return DeviceMoeNow(op.layer, op.experts, op.observed);
    case StepOp::Kind::kDenseMlp:
      return DenseMlpNow(op.layer);
  }
  return absl::InternalError("unknown step op");
}

absl::Status CudaDecoderStep::RunDeferredNow() {
  mode_ = Mode::kDirect;
  std::vector<StepOp> ops = std::move(deferred_);
  deferred_.clear();
  for (const StepOp& op : ops) VISMOE_RETURN_IF_ERROR(Execute(op));
  return absl::OkStatus();
}

absl::Status CudaDecoderStep::Flush() {
  if (mode_ == Mode::kDirect) return absl::OkStatus();
  if (mode_ == Mode::kReplay) {
    if (deferred_.size() != replay_->ops.size()) {
      ops_.graphs_.Erase(key_);  // the step ended sooner than recorded
      replay_ = nullptr;
      return RunDeferredNow();
    }
    // What the graph stages for the host, as the ops would have marked it.
    for (const StepOp& op : deferred_) {
      if (op.kind == StepOp::Kind::kDeviceMoe) {
        VISMOE_RETURN_IF_ERROR(ops_.staging_.Mark(op.layer, n_, op.observed));
      }
    }
    mode_ = Mode::kDirect;
    deferred_.clear();
    ++ops_.graph_launches_;
    return replay_->exec.Launch(st_);
  }
  // Record: capture the deferred ops into a graph, then launch it.
  if (ops_.graph_capture_failed_ || deferred_.empty()) return RunDeferredNow();
  VISMOE_RETURN_IF_ERROR(GraphExec::BeginCapture(st_));
  capturing_ = true;
  absl::Status ran = absl::OkStatus();
  for (const StepOp& op : deferred_) {
    ran = Execute(op);
    if (!ran.ok()) break;
  }
  capturing_ = false;
  absl::StatusOr<GraphExec> exec = GraphExec::EndCapture(st_);
  if (ran.ok() && exec.ok()) {
    const StepGraph* g = ops_.graphs_.Put(key_, std::move(deferred_), *std::move(exec));
    deferred_.clear();
    mode_ = Mode::kDirect;
    ++ops_.graphs_captured_;
    ++ops_.graph_launches_;
    return g->exec.Launch(st_);
  }
  // Nothing ran: launch the ops one by one instead, and capture no more.
  ops_.graph_capture_failed_ = true;
  spdlog::warn("CUDA graph capture of a decode step failed ({}); steps launch op by op",
               !ran.ok() ? ran.ToString() : exec.status().ToString());
  ops_.staging_.Reset();  // the capture's marks: nothing was staged
  return RunDeferredNow();
}

}  // namespace vismoe::cuda
