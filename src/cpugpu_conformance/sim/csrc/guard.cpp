// What torch asks of a device type through c10: the current device and stream of each
// thread, new streams, events (DeviceGuardImplInterface), and the PrivateUse1 hooks
// (is a pointer pinned, the pinned allocator, is a device in use).
#include "sim.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace sim {
namespace {

constexpr auto kType = c10::DeviceType::PrivateUse1;

int index_of(c10::Device device) { return device.has_index() ? device.index() : current_device(); }

c10::Stream make_stream(int device, int64_t id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, static_cast<c10::DeviceIndex>(device)), id);
}

struct GuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kType; }

  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device old = getDevice();
    if (device.index() != old.index()) setDevice(device);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kType, static_cast<c10::DeviceIndex>(current_device())); }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kType, "sim: not a sim device: ", device);
    set_current_device(index_of(device));
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    int index = index_of(device);
    if (index >= 0 && index < kDeviceCount) set_current_device(index);
  }

  c10::Stream getStream(c10::Device device) const override {
    int index = index_of(device);
    return make_stream(index, current_stream(index));
  }
  c10::Stream getDefaultStream(c10::Device device) const override { return make_stream(index_of(device), 0); }
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool) const override {
    int index = index_of(device);
    return make_stream(index, next_pool_stream(index));
  }
  c10::Stream getNewStream(c10::Device device, int) const override {
    int index = index_of(device);
    return make_stream(index, next_pool_stream(index));
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    int index = stream.device_index();
    c10::Stream old = make_stream(index, current_stream(index));
    set_current_stream(index, stream.id());
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override { return kDeviceCount; }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "sim: an event recorded on sim:",
                stream.device_index(), " belongs to sim:", device_index);
    if (*event == nullptr) *event = new_event();
    record_event(static_cast<Event*>(*event), stream.device_index(), stream.id());
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event != nullptr) block_on_event(static_cast<Event*>(event), stream.device_index(), stream.id());
  }
  bool queryEvent(void* event) const override { return event == nullptr || query_event(static_cast<Event*>(event)); }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    destroy_event(static_cast<Event*>(event));
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) synchronize_event(static_cast<Event*>(event));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "sim: elapsed time needs two recorded events");
    return elapsed_ms(static_cast<Event*>(start), static_cast<Event*>(end));
  }

  bool queryStream(const c10::Stream& stream) const override { return query_stream(stream.device_index(), stream.id()); }
  void synchronizeStream(const c10::Stream& stream) const override {
    synchronize_stream(stream.device_index(), stream.id());
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    synchronize_device(device_index < 0 ? current_device() : device_index);
  }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {
    // Queued work holds the blocks it touches (memory.cpp): nothing to record.
  }
};

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  c10::DeviceIndex deviceCount() const override { return kDeviceCount; }
  void setCurrentDevice(c10::DeviceIndex device) const override { set_current_device(device); }
  c10::DeviceIndex getCurrentDevice() const override { return static_cast<c10::DeviceIndex>(current_device()); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    auto old = getCurrentDevice();
    set_current_device(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }
  bool isPinnedPtr(const void* data) const override { return is_pinned(data); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override { return has_context(device_index); }
  at::Device getDeviceFromPtr(void* data) const override {
    BlockRef block = find_block(data);
    TORCH_CHECK(block != nullptr && block->device >= 0, "sim: ", data, " is not sim device memory");
    return at::Device(kType, static_cast<c10::DeviceIndex>(block->device));
  }
  void init() const override {}
  void resizePrivateUse1Bytes(const c10::Storage&, size_t) const override {
    TORCH_CHECK(false, "sim: storages are resized by resize_ on a sim tensor, not directly");
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, device_allocator());

struct RegisterHooks {
  RegisterHooks() { at::RegisterPrivateUse1HooksInterface(new Hooks()); }  // leaked: torch keeps the pointer
} register_hooks;

}  // namespace
}  // namespace sim
