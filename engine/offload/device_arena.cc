#include "engine/offload/device_arena.h"

#include "absl/strings/str_cat.h"

namespace vismoe {
namespace {

int64_t AlignUp(int64_t n) {
  return (n + DeviceArena::kAlignment - 1) / DeviceArena::kAlignment * DeviceArena::kAlignment;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceArena>> DeviceArena::Create(int64_t capacity_bytes,
                                                                 DeviceAllocator* allocator) {
  if (capacity_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device arena capacity must be >= 0, got ", capacity_bytes));
  }
  std::unique_ptr<DeviceArena> a(new DeviceArena());
  a->allocator_ = allocator != nullptr ? allocator : HeapDeviceAllocator::Default();
  a->capacity_ = capacity_bytes;
  if (capacity_bytes > 0) {
    a->base_ = static_cast<char*>(a->allocator_->Allocate(static_cast<size_t>(capacity_bytes)));
    if (a->base_ == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate a device arena of ",
                                                       capacity_bytes, " bytes from the ",
                                                       a->allocator_->name(), " allocator"));
    }
  }
  return a;
}

DeviceArena::~DeviceArena() {
  if (base_ != nullptr) allocator_->Free(base_, static_cast<size_t>(capacity_));
}

absl::StatusOr<char*> DeviceArena::Carve(const std::string& region, int64_t bytes) {
  const int64_t size = AlignUp(bytes);
  if (bytes < 0 || used_ + size > capacity_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "device arena: region '", region, "' of ", bytes, " bytes does not fit in the ",
        capacity_ - used_, " bytes left of ", capacity_));
  }
  char* p = base_ + used_;
  used_ += size;
  regions_.push_back({region, bytes});
  return p;
}

bool DeviceArena::Contains(const void* p, int64_t bytes) const {
  const char* c = static_cast<const char*>(p);
  return base_ != nullptr && c >= base_ && c + bytes <= base_ + used_;
}

int64_t DeviceArena::CapacityFor(const std::vector<int64_t>& region_bytes) {
  int64_t total = 0;
  for (int64_t b : region_bytes) total += AlignUp(b);
  return total;
}

}  // namespace vismoe
