// WeightPacker: host-side staging of a CUDA model's resident weights. Each
// tensor is converted to bf16 (any float dtype in, and block-scaled FP8
// dequantised as cpu::DequantizeF8 reads it) at an aligned offset of
// one host buffer, which the model uploads in one copy and then addresses by
// the offsets Add() returned.
// Thread safety: none (used during a model's Create). Ownership: owns the buffer.
#ifndef VISMOE_ENGINE_BACKENDS_CUDA_WEIGHT_PACKER_H_
#define VISMOE_ENGINE_BACKENDS_CUDA_WEIGHT_PACKER_H_

#include <cstddef>
#include <initializer_list>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/device/cuda/device.h"
#include "engine/device/cuda/types.h"

namespace vismoe::cuda {

class WeightPacker {
 public:
  // Offsets are multiples of this (the device arena's alignment).
  static constexpr size_t kAlign = DeviceArena::kDefaultAlignment;

  // Appends `t` as bf16; returns its byte offset in the buffer.
  size_t Add(const TensorView& t);
  // Appends the tensors back to back, one aligned block: matrices with the
  // same number of columns stacked into one (q, k and v into one GEMM's
  // weight). Returns the block's byte offset.
  size_t AddStacked(std::initializer_list<const TensorView*> tensors);
  // Appends fp32 values bit for bit (e.g. a rope inv_freq table); returns the byte offset.
  size_t AddF32(const std::vector<float>& v);
  const std::vector<Bf16>& host() const { return host_; }

 private:
  std::vector<Bf16> host_;
};

}  // namespace vismoe::cuda

#endif  // VISMOE_ENGINE_BACKENDS_CUDA_WEIGHT_PACKER_H_
