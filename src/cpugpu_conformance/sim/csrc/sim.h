// sim: a simulated accelerator for torch's PrivateUse1 dispatch key.
//
// Two devices whose memory the host cannot touch except through this runtime (pages
// mapped PROT_NONE, opened only while a copy or fill runs), a pinned host allocator,
// and streams that each run their queue in order on a worker thread, so that a
// non-blocking copy really returns before it lands. Written for cpugpu-conformance:
// just enough of a device for the CpuGpuBuffer contract, and a clear error for the rest.
#pragma once

#include <c10/core/Allocator.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sim {

constexpr int kDeviceCount = 2;
// Stream 0 of each device is its default stream; torch.Stream() hands out 1..kPoolStreams
// round robin, as CUDA's stream pool does (a stream is a worker thread: never one per call).
constexpr int64_t kPoolStreams = 15;
// The simulated clock of sleep(cycles), in cycles per second.
constexpr double kClockHz = 1e9;

void check_device(int64_t index);

// ---- memory (memory.cpp)

// One allocation: device memory (device >= 0, mapped PROT_NONE) or pinned host memory (device == -1).
struct Block {
  void* base = nullptr;
  size_t size = 0;    // bytes asked for
  size_t mapped = 0;  // bytes mapped (whole pages)
  int device = -1;
  ~Block();
};
using BlockRef = std::shared_ptr<Block>;

// The live block holding address p (nullptr: none). Work queued on a stream holds the
// blocks it touches, so memory freed by the host stays mapped until that work is done.
BlockRef find_block(const void* p);
bool is_pinned(const void* p);
c10::Allocator* device_allocator();
c10::Allocator* pinned_allocator();

// While alive, the given device blocks are readable and writable (and no other thread's
// Access is): the only way host code reaches device memory.
class Access {
 public:
  explicit Access(const std::vector<BlockRef>& blocks);
  ~Access();
  Access(const Access&) = delete;
  Access& operator=(const Access&) = delete;

 private:
  std::vector<Block*> opened_;
  std::unique_lock<std::mutex> bus_;
};

// ---- devices and streams (streams.cpp)

using Job = std::function<void()>;

int current_device();
void set_current_device(int index);
int64_t current_stream(int device);
void set_current_stream(int device, int64_t id);
int64_t next_pool_stream(int device);
bool has_context(int device);
void touch(int device);  // the device is in use from now (hasPrimaryContext)

void enqueue(int device, int64_t stream, Job job);
// A job that keeps the stream busy for `span`, or until the host waits for it (streams.cpp).
void enqueue_sleep(int device, int64_t stream, std::chrono::duration<double> span);
void synchronize_stream(int device, int64_t stream);
bool query_stream(int device, int64_t stream);
void synchronize_device(int device);

// Events: a handle torch keeps as void*.
struct Event;
Event* new_event();
void destroy_event(Event* event);
void record_event(Event* event, int device, int64_t stream);
void block_on_event(Event* event, int device, int64_t stream);
bool query_event(Event* event);
void synchronize_event(Event* event);
double elapsed_ms(Event* start, Event* end);

// Which work a stream has waited for (a vector clock over every stream): between
// join_check_begin and join_check_end, work queued on another stream that the caller's
// stream never waited for (by an event, wait_stream) and the host never synchronized.
void join_check_begin(int device, int64_t stream);
std::vector<std::string> join_check_end();

}  // namespace sim
