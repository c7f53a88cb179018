// Device memory the host cannot touch, pinned host memory, and the registry of both.
//
// Device blocks are anonymous mappings with PROT_NONE: a host pointer that strays into
// one faults (SIGSEGV) instead of silently reading or writing it. Access opens the
// blocks a copy or fill needs, under one lock (the simulated bus), and closes them again.
#include "sim.h"

#include <c10/util/Exception.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>

namespace sim {
namespace {

std::mutex registry_mutex;
std::map<uintptr_t, BlockRef>& registry() {
  static auto* blocks = new std::map<uintptr_t, BlockRef>();  // leaked: freed blocks outlive static destructors
  return *blocks;
}
std::mutex bus_mutex;

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

void* map_pages(size_t mapped, int protection) {
  void* p = mmap(nullptr, mapped, protection, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TORCH_CHECK(p != MAP_FAILED, "sim: cannot map ", mapped, " bytes: ", std::strerror(errno));
  return p;
}

void release(void* base) {
  BlockRef dropped;  // unmapped after the lock is let go, once no queued work holds it
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    auto it = registry().find(reinterpret_cast<uintptr_t>(base));
    if (it == registry().end()) return;
    dropped = std::move(it->second);
    registry().erase(it);
  }
}

void release_nothing(void*) {}

c10::DataPtr allocate_block(size_t nbytes, int device) {
  c10::Device where = device >= 0 ? c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device))
                                  : c10::Device(c10::DeviceType::CPU);
  if (nbytes == 0) return {nullptr, nullptr, &release_nothing, where};
  auto block = std::make_shared<Block>();
  block->size = nbytes;
  block->mapped = (nbytes + page_size() - 1) / page_size() * page_size();
  block->device = device;
  block->base = map_pages(block->mapped, device >= 0 ? PROT_NONE : PROT_READ | PROT_WRITE);
  void* base = block->base;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    registry()[reinterpret_cast<uintptr_t>(base)] = std::move(block);
  }
  return {base, base, &release, where};
}

struct DeviceAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    int device = current_device();
    touch(device);
    return allocate_block(nbytes, device);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // Storage-level copies (rare): wait for the devices, then copy through an Access.
    std::vector<BlockRef> blocks;
    for (const void* p : {static_cast<const void*>(dest), src}) {
      if (BlockRef block = find_block(p)) {
        if (block->device >= 0) synchronize_device(block->device);
        blocks.push_back(std::move(block));
      }
    }
    Access open(blocks);
    std::memcpy(dest, src, count);
  }
};

struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override { return allocate_block(nbytes, -1); }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
};

}  // namespace

Block::~Block() {
  if (base != nullptr) munmap(base, mapped);
}

BlockRef find_block(const void* p) {
  auto address = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry().upper_bound(address);
  if (it == registry().begin()) return nullptr;
  --it;
  const BlockRef& block = it->second;
  return address < it->first + block->size ? block : nullptr;
}

bool is_pinned(const void* p) {
  BlockRef block = find_block(p);
  return block != nullptr && block->device < 0;
}

c10::Allocator* device_allocator() {
  static DeviceAllocator allocator;
  return &allocator;
}

c10::Allocator* pinned_allocator() {
  static PinnedAllocator allocator;
  return &allocator;
}

Access::Access(const std::vector<BlockRef>& blocks) : bus_(bus_mutex) {
  for (const BlockRef& block : blocks) {
    if (!block || block->device < 0) continue;  // host memory needs no opening
    bool seen = false;
    for (Block* open : opened_) seen = seen || open == block.get();
    if (seen) continue;
    TORCH_CHECK(mprotect(block->base, block->mapped, PROT_READ | PROT_WRITE) == 0, "sim: cannot open device memory: ",
                std::strerror(errno));
    opened_.push_back(block.get());
  }
}

Access::~Access() {
  for (Block* block : opened_) mprotect(block->base, block->mapped, PROT_NONE);
}

}  // namespace sim
