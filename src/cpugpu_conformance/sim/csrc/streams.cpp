// Streams, events and the current device: each stream is a queue served in order by a
// worker thread of its own, so work queued on it runs while the host goes on.
//
// Beside the queues, a vector clock records which work each stream has waited for
// (through events: Stream.wait_stream, Stream.wait_event): join_check_end names the
// streams whose work the caller's stream never waited for, what CUDA's graph capture
// refuses as an unjoined fork, deterministically where timing is not.
#include "sim.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <thread>
#include <utility>

namespace sim {

void check_device(int64_t index) {
  TORCH_CHECK(index >= 0 && index < kDeviceCount, "sim: invalid device index ", index, " (the simulated accelerator has ",
              kDeviceCount, " devices: sim:0 and sim:1)");
}

namespace {

using Key = std::pair<int, int64_t>;  // (device, stream id)
using Clock = std::map<Key, uint64_t>;

struct StreamState {
  int device;
  int64_t id;
  std::mutex m;
  std::condition_variable cv;
  std::deque<Job> queue;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  std::string error;  // the first failure of queued work, raised at the next synchronize

  StreamState(int d, int64_t i) : device(d), id(i) {
    std::thread([this] { serve(); }).detach();  // streams live for the process, like CUDA's
  }

  void serve() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [this] { return !queue.empty(); });
        job = std::move(queue.front());
        queue.pop_front();
      }
      std::string failed;
      try {
        job();
      } catch (const std::exception& exc) {
        failed = exc.what();
      }
      job = nullptr;  // what the job held (memory blocks) goes before it counts as done
      {
        std::lock_guard<std::mutex> lock(m);
        if (!failed.empty() && error.empty()) error = failed;
        ++completed;
      }
      cv.notify_all();
    }
  }

  void raise_error(std::unique_lock<std::mutex>& lock) {
    if (error.empty()) return;
    std::string message = std::move(error);
    error.clear();
    lock.unlock();
    TORCH_CHECK(false, "sim: work queued on sim:", device, " stream ", id, " failed: ", message);
  }
};

std::mutex streams_mutex;
StreamState* streams[kDeviceCount][kPoolStreams + 1] = {};
std::atomic<int64_t> pool_cursor[kDeviceCount];
std::atomic<bool> contexts[kDeviceCount];

// The vector clocks, under one lock.
std::mutex clock_mutex;
std::map<Key, uint64_t> queued;       // jobs queued on each stream so far
std::map<Key, Clock> waited;          // for each stream: how far into each other stream it has waited
std::map<Key, uint64_t> host_synced;  // how far the host has synchronized each stream
bool checking = false;
Key check_caller;
std::map<Key, uint64_t> check_start;

StreamState& state(int device, int64_t id) {
  check_device(device);
  TORCH_CHECK(id >= 0 && id <= kPoolStreams, "sim: unknown stream id ", id, " on sim:", device);
  std::lock_guard<std::mutex> lock(streams_mutex);
  StreamState*& s = streams[device][id];
  if (s == nullptr) s = new StreamState(device, id);  // leaked on purpose: its worker never ends
  return *s;
}

thread_local int tl_device = 0;
thread_local int64_t tl_stream[kDeviceCount] = {};

void merge(Clock& into, const Clock& from) {
  for (const auto& [key, count] : from) {
    uint64_t& mine = into[key];
    if (count > mine) mine = count;
  }
}

}  // namespace

struct EventState {
  std::mutex m;
  std::condition_variable cv;
  uint64_t recorded = 0;  // versions recorded so far
  uint64_t done = 0;      // the latest version reached by its stream
  Clock snapshot;         // what the latest recording stream had waited for, itself included
  std::chrono::steady_clock::time_point when;
};

struct Event {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

int current_device() { return tl_device; }

void set_current_device(int index) {
  check_device(index);
  tl_device = index;
}

int64_t current_stream(int device) {
  check_device(device);
  return tl_stream[device];
}

void set_current_stream(int device, int64_t id) {
  check_device(device);
  TORCH_CHECK(id >= 0 && id <= kPoolStreams, "sim: unknown stream id ", id);
  tl_stream[device] = id;
}

int64_t next_pool_stream(int device) {
  check_device(device);
  return 1 + pool_cursor[device].fetch_add(1) % kPoolStreams;
}

bool has_context(int device) { return device >= 0 && device < kDeviceCount && contexts[device].load(); }

void touch(int device) {
  check_device(device);
  contexts[device].store(true);
}

void enqueue(int device, int64_t stream, Job job) {
  StreamState& s = state(device, stream);
  touch(device);
  {
    std::lock_guard<std::mutex> lock(clock_mutex);
    uint64_t& count = queued[{device, stream}];
    ++count;
    waited[{device, stream}][{device, stream}] = count;  // a stream always waits for itself
  }
  {
    std::lock_guard<std::mutex> lock(s.m);
    s.queue.push_back(std::move(job));
    ++s.enqueued;
  }
  s.cv.notify_all();
}

void synchronize_stream(int device, int64_t stream) {
  StreamState& s = state(device, stream);
  std::unique_lock<std::mutex> lock(s.m);
  uint64_t target = s.enqueued;
  s.cv.wait(lock, [&] { return s.completed >= target; });
  {
    std::lock_guard<std::mutex> clock(clock_mutex);
    uint64_t& synced = host_synced[{device, stream}];
    if (target > synced) synced = target;
  }
  s.raise_error(lock);
}

bool query_stream(int device, int64_t stream) {
  StreamState& s = state(device, stream);
  std::unique_lock<std::mutex> lock(s.m);
  s.raise_error(lock);
  return s.completed == s.enqueued;
}

void synchronize_device(int device) {
  check_device(device);
  for (int64_t id = 0; id <= kPoolStreams; ++id) {
    bool exists;
    {
      std::lock_guard<std::mutex> lock(streams_mutex);
      exists = streams[device][id] != nullptr;
    }
    if (exists) synchronize_stream(device, id);
  }
}

Event* new_event() { return new Event(); }

void destroy_event(Event* event) { delete event; }

void record_event(Event* event, int device, int64_t stream) {
  std::shared_ptr<EventState> ev = event->state;
  uint64_t version;
  {
    std::lock_guard<std::mutex> lock(ev->m);
    version = ++ev->recorded;
  }
  enqueue(device, stream, [ev, version] {
    {
      std::lock_guard<std::mutex> lock(ev->m);
      if (version > ev->done) ev->done = version;
      ev->when = std::chrono::steady_clock::now();
    }
    ev->cv.notify_all();
  });
  std::lock_guard<std::mutex> clock(clock_mutex);
  std::lock_guard<std::mutex> lock(ev->m);
  ev->snapshot = waited[{device, stream}];
}

void block_on_event(Event* event, int device, int64_t stream) {
  std::shared_ptr<EventState> ev = event->state;
  uint64_t version;
  Clock snapshot;
  {
    std::lock_guard<std::mutex> lock(ev->m);
    version = ev->recorded;
    snapshot = ev->snapshot;
  }
  if (version == 0) return;  // never recorded: nothing to wait for (torch's rule)
  enqueue(device, stream, [ev, version] {
    std::unique_lock<std::mutex> lock(ev->m);
    ev->cv.wait(lock, [&] { return ev->done >= version; });
  });
  std::lock_guard<std::mutex> clock(clock_mutex);
  merge(waited[{device, stream}], snapshot);
}

bool query_event(Event* event) {
  std::lock_guard<std::mutex> lock(event->state->m);
  return event->state->done >= event->state->recorded;
}

void synchronize_event(Event* event) {
  std::shared_ptr<EventState> ev = event->state;
  std::unique_lock<std::mutex> lock(ev->m);
  uint64_t version = ev->recorded;
  ev->cv.wait(lock, [&] { return ev->done >= version; });
}

double elapsed_ms(Event* start, Event* end) {
  auto when = [](Event* event) {
    std::lock_guard<std::mutex> lock(event->state->m);
    TORCH_CHECK(event->state->recorded > 0 && event->state->done >= event->state->recorded,
                "sim: elapsed time needs two events recorded and completed");
    return event->state->when;
  };
  std::chrono::duration<double, std::milli> span = when(end) - when(start);
  return span.count();
}

void join_check_begin(int device, int64_t stream) {
  check_device(device);
  std::lock_guard<std::mutex> lock(clock_mutex);
  checking = true;
  check_caller = {device, stream};
  check_start = queued;
}

std::vector<std::string> join_check_end() {
  std::lock_guard<std::mutex> lock(clock_mutex);
  TORCH_CHECK(checking, "sim: join_check_end without join_check_begin");
  checking = false;
  std::vector<std::string> unjoined;
  const Clock& caller = waited[check_caller];
  for (const auto& [key, count] : queued) {
    auto start = check_start.find(key);
    uint64_t before = start == check_start.end() ? 0 : start->second;
    if (key == check_caller || count == before) continue;  // no work queued there meanwhile
    auto seen = caller.find(key);
    uint64_t joined = seen == caller.end() ? 0 : seen->second;
    auto synced = host_synced.find(key);
    if (synced != host_synced.end() && synced->second > joined) joined = synced->second;
    if (joined < count) {
      unjoined.push_back("sim:" + std::to_string(key.first) + " stream " + std::to_string(key.second) + " got " +
                         std::to_string(count - before) + " job(s) that stream " + std::to_string(check_caller.second) +
                         " of sim:" + std::to_string(check_caller.first) + " (the caller's) never waits for");
    }
  }
  return unjoined;
}

}  // namespace sim
