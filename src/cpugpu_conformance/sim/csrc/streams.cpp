// Streams, events and the current device: each stream is a queue served in order by a
// worker thread of its own, so work queued on it runs while the host goes on.
//
// Beside the queues, a vector clock records which work each stream has waited for
// (through events: Stream.wait_stream, Stream.wait_event): join_check_end names the
// streams whose work the caller's stream never waited for, what CUDA's graph capture
// refuses as an unjoined fork, deterministically where timing is not.
//
// A long job (sleep) keeps its stream busy for its span of simulated clock, except that time
// runs ahead while the host is blocked: a host that waits for a stream or an event (synchronize,
// a blocking copy) ends every sleep that what it waits for is behind, on that stream and,
// through device-side event waits, on the streams it waits for. Time runs ahead only once every
// other stream is quiet (idle, or waiting for an event) and none is asleep: work they hold that
// would have run during the span (a copy on a private stream) still runs before the sleep ends,
// as it would on a device, and a sleep beside another waits its span out, so what lands in which
// order is what the span would give, every time. What the
// host can observe is the same (a host that waits finds the job done; one that only queries finds
// it running for its span); what it saves is the span, which the suite's non-blocking checks
// would otherwise wait out thousands of times.
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
  uint64_t hurried = 0;  // the host waits for the jobs up to this place: their sleeps end at once
  // Device-side event waits still queued: the place of the waiting job -> the stream and place it waits for.
  std::map<uint64_t, std::pair<StreamState*, uint64_t>> waits;
  std::string error;  // the first failure of queued work, raised at the next synchronize
  // Quiet (not busy): idle, or blocked in a sleep or an event wait. Busy: running a job, or holding queued work
  // it could run. A hurried sleep ends only once no stream is busy (busy_streams, below).
  bool running = false;
  bool blocked = false;
  bool counted_busy = false;

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
        running = true;
        refresh();
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
        waits.erase(waits.begin(), waits.upper_bound(completed));
        running = false;
        refresh();
      }
      cv.notify_all();
    }
  }

  // With m held: count this stream among the busy ones, or not, as it is now.
  void refresh();

  // With m held: the worker is blocked in a sleep or an event wait from now, or no longer.
  void set_blocked(bool now) {
    blocked = now;
    refresh();
  }

  void raise_error(std::unique_lock<std::mutex>& lock) {
    if (error.empty()) return;
    std::string message = std::move(error);
    error.clear();
    lock.unlock();
    TORCH_CHECK(false, "sim: work queued on sim:", device, " stream ", id, " failed: ", message);
  }
};

// How many streams are busy (StreamState::refresh) and how many asleep, under their own lock, taken
// after a stream's.
std::mutex quiet_mutex;
std::condition_variable quiet_cv;
int busy_streams = 0;
int sleeping_streams = 0;

void count_sleeping(int delta) {
  std::lock_guard<std::mutex> lock(quiet_mutex);
  sleeping_streams += delta;
  quiet_cv.notify_all();
}

void StreamState::refresh() {
  bool busy = !blocked && (running || !queue.empty());
  if (busy == counted_busy) return;
  counted_busy = busy;
  std::lock_guard<std::mutex> lock(quiet_mutex);
  busy_streams += busy ? 1 : -1;
  if (busy_streams == 0) quiet_cv.notify_all();
}

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

// An event is a place in one stream's order: reached once that stream has completed the marker
// queued when it was recorded (and so everything queued before it).
struct EventState {
  std::mutex m;
  StreamState* stream = nullptr;  // nullptr: never recorded
  uint64_t place = 0;
  Clock snapshot;  // what the recording stream had waited for, itself included
  std::chrono::steady_clock::time_point when;
};

struct Event {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

namespace {

std::pair<StreamState*, uint64_t> place_of(const std::shared_ptr<EventState>& ev) {
  std::lock_guard<std::mutex> lock(ev->m);
  return {ev->stream, ev->place};
}

}  // namespace

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

// Queue `job` and return its place in the stream's order (its 1-based count): done once completed reaches it.
// `waits_for` (a device-side event wait): the stream and place the job waits for, which a host waiting
// for this job hurries too.
uint64_t enqueue_at(int device, int64_t stream, Job job, std::pair<StreamState*, uint64_t> waits_for = {nullptr, 0}) {
  StreamState& s = state(device, stream);
  touch(device);
  {
    std::lock_guard<std::mutex> lock(clock_mutex);
    uint64_t& count = queued[{device, stream}];
    ++count;
    waited[{device, stream}][{device, stream}] = count;  // a stream always waits for itself
  }
  uint64_t place;
  {
    std::lock_guard<std::mutex> lock(s.m);
    s.queue.push_back(std::move(job));
    place = ++s.enqueued;
    if (waits_for.first != nullptr) s.waits[place] = waits_for;
    s.refresh();
  }
  s.cv.notify_all();
  return place;
}

void enqueue(int device, int64_t stream, Job job) { enqueue_at(device, stream, std::move(job)); }

// Wait until the stream has completed its first `place` jobs.
void wait_for(StreamState& s, uint64_t place) {
  std::unique_lock<std::mutex> lock(s.m);
  s.cv.wait(lock, [&] { return s.completed >= place; });
}

// The host is about to wait for the first `place` jobs of `s`: the sleeps among them end now, and so do
// those of the jobs their device-side event waits are behind (dependencies point back in time: it ends).
void hurry(StreamState& s, uint64_t place) {
  std::vector<std::pair<StreamState*, uint64_t>> behind;
  {
    std::lock_guard<std::mutex> lock(s.m);
    if (place <= s.hurried) return;
    s.hurried = place;
    for (auto it = s.waits.begin(); it != s.waits.end() && it->first <= place; ++it) behind.push_back(it->second);
  }
  s.cv.notify_all();
  for (const auto& [other, at] : behind) hurry(*other, at);
}

// What the host waits for, after hurrying it.
void host_wait_for(StreamState& s, uint64_t place) {
  hurry(s, place);
  wait_for(s, place);
}

void enqueue_sleep(int device, int64_t stream, std::chrono::duration<double> span) {
  StreamState* s = &state(device, stream);
  enqueue(device, stream, [s, span] {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(span);
    std::unique_lock<std::mutex> lock(s->m);
    uint64_t mine = s->completed + 1;  // the worker runs its queue in order: this job is next
    // Counted asleep before it stops counting as busy, and busy again before it stops counting as asleep: a
    // hurried sleep on another stream never sees this one as neither (and ends before it).
    count_sleeping(1);
    s->set_blocked(true);
    bool hurried = s->cv.wait_until(lock, deadline, [&] { return s->hurried >= mine; });
    if (hurried) {  // time runs ahead once the other streams have run what they could, and none sleeps
      lock.unlock();
      {
        std::unique_lock<std::mutex> quiet(quiet_mutex);
        quiet_cv.wait_until(quiet, deadline, [] { return busy_streams == 0 && sleeping_streams == 1; });
      }
      lock.lock();
    }
    s->set_blocked(false);
    count_sleeping(-1);
  });
}

void synchronize_stream(int device, int64_t stream) {
  StreamState& s = state(device, stream);
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(s.m);
    target = s.enqueued;
  }
  host_wait_for(s, target);
  std::unique_lock<std::mutex> lock(s.m);
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
  uint64_t place = enqueue_at(device, stream, [ev] {
    std::lock_guard<std::mutex> lock(ev->m);
    ev->when = std::chrono::steady_clock::now();
  });
  std::lock_guard<std::mutex> clock(clock_mutex);
  std::lock_guard<std::mutex> lock(ev->m);
  ev->stream = &state(device, stream);
  ev->place = place;
  ev->snapshot = waited[{device, stream}];
}

void block_on_event(Event* event, int device, int64_t stream) {
  std::shared_ptr<EventState> ev = event->state;
  Clock snapshot;
  StreamState* recorded;
  uint64_t place;
  {
    std::lock_guard<std::mutex> lock(ev->m);
    recorded = ev->stream;
    place = ev->place;
    snapshot = ev->snapshot;
  }
  if (recorded == nullptr) return;  // never recorded: nothing to wait for (torch's rule)
  StreamState* self = &state(device, stream);
  auto wait = [self, recorded, place] {
    {
      std::lock_guard<std::mutex> lock(self->m);
      self->set_blocked(true);
    }
    wait_for(*recorded, place);
    std::lock_guard<std::mutex> lock(self->m);
    self->set_blocked(false);
  };
  enqueue_at(device, stream, wait, {recorded, place});
  std::lock_guard<std::mutex> clock(clock_mutex);
  merge(waited[{device, stream}], snapshot);
}

bool query_event(Event* event) {
  auto [recorded, place] = place_of(event->state);
  if (recorded == nullptr) return true;
  std::lock_guard<std::mutex> lock(recorded->m);
  return recorded->completed >= place;
}

void synchronize_event(Event* event) {
  auto [recorded, place] = place_of(event->state);
  if (recorded != nullptr) host_wait_for(*recorded, place);
}

double elapsed_ms(Event* start, Event* end) {
  auto when = [](Event* event) {
    TORCH_CHECK(query_event(event) && place_of(event->state).first != nullptr,
                "sim: elapsed time needs two events recorded and completed");
    std::lock_guard<std::mutex> lock(event->state->m);
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
