// The ATen kernels of the sim device: allocation, views, fill and copies, and, through a
// copy to the host and back, a short list of comparisons and reductions. Every other
// operator fails with one message naming it.
//
// Copies behave as CUDA's do: between the device and pinned host memory a non_blocking
// copy is queued on the current stream of the device and returns at once; from or into
// pageable memory the host first waits for that stream and copies itself; a copy
// between sim tensors is queued. Fills are queued. Kernels compute with CPU tensors
// aliasing the device memory, inside an Access (memory.cpp).
#include "sim.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include <algorithm>
#include <chrono>
#include <set>

namespace sim {
namespace {

constexpr auto kKey = c10::DispatchKey::PrivateUse1;

// Kernels compute on CPU aliases below autograd and ADInplaceOrView: the caller's version counter and
// inference-mode checks ran before the kernel, and a worker thread has modes of its own.
using BelowAutograd = at::AutoDispatchBelowADInplaceOrView;

struct DeviceScope {  // the current device for the allocator, put back after
  int before;
  explicit DeviceScope(int index) : before(current_device()) { set_current_device(index); }
  ~DeviceScope() { set_current_device(before); }
};

int device_of(const std::optional<at::Device>& device) {
  int index = device.has_value() && device->has_index() ? device->index() : current_device();
  check_device(index);
  return index;
}

bool on_sim(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

// A CPU tensor over t's own memory: what a kernel computes on once that memory is open.
at::Tensor host_alias(const at::Tensor& t) {
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), at::TensorOptions().dtype(t.dtype()).device(at::kCPU));
}

// The block holding t's storage (nullptr for pageable host memory): queued work keeps it alive.
BlockRef block_of(const at::Tensor& t) {
  const void* base = t.storage().data();
  return base == nullptr ? nullptr : find_block(base);
}

bool pinned(const at::Tensor& t) { return t.is_cpu() && t.storage().data() != nullptr && is_pinned(t.storage().data()); }

// --- allocation

at::Tensor empty(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                 std::optional<at::Device> device, std::optional<bool> pin_memory,
                 std::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!pin_memory.value_or(false), "sim: only host tensors can be pinned");
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided, "sim: only strided tensors");
  DeviceScope scope(device_of(device));
  return at::detail::empty_generic(C10_AS_INTARRAYREF_SLOW(size), device_allocator(), c10::DispatchKeySet(kKey),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false), "sim: only host tensors can be pinned");
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided, "sim: only strided tensors");
  DeviceScope scope(device_of(device));
  return at::detail::empty_strided_generic(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           device_allocator(), c10::DispatchKeySet(kKey), c10::dtype_or_default(dtype));
}

// Grow a storage to `nbytes` (resize_, set_): a new block, the old bytes copied over once the device is idle.
void grow(const c10::Storage& storage, size_t nbytes, int device) {
  if (nbytes <= storage.nbytes()) return;
  c10::DataPtr fresh;
  {
    DeviceScope scope(device);
    fresh = device_allocator()->allocate(nbytes);
  }
  if (storage.nbytes() > 0) {
    synchronize_device(device);
    std::vector<BlockRef> blocks{find_block(storage.data()), find_block(fresh.get())};
    Access open(blocks);
    std::memcpy(fresh.get(), storage.data(), storage.nbytes());
  }
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
}

const at::Tensor& resize(const at::Tensor& self, c10::SymIntArrayRef size, std::optional<at::MemoryFormat> format) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(C10_AS_INTARRAYREF_SLOW(size));
  if (format.has_value()) impl->empty_tensor_restride(*format);
  size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.dtype().itemsize(),
                                                   self.storage_offset());
  grow(self.storage(), needed, self.device().index());
  return self;
}

// --- views

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> offset) {
  std::optional<int64_t> storage_offset;
  if (offset.has_value()) storage_offset = offset->guard_int(__FILE__, __LINE__);
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, c10::SymInt offset, c10::SymIntArrayRef size,
                        c10::SymIntArrayRef stride) {
  TORCH_CHECK(source.device().type() == c10::DeviceType::PrivateUse1, "sim: set_ to a storage on ", source.device());
  int64_t storage_offset = offset.guard_int(__FILE__, __LINE__);
  TORCH_CHECK(storage_offset >= 0, "sim: set_ with a negative storage offset");
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(source);
  impl->set_storage_offset(storage_offset);
  if (stride.empty() && !size.empty()) {
    impl->set_sizes_contiguous(C10_AS_INTARRAYREF_SLOW(size));
  } else {
    impl->set_sizes_and_strides(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
  }
  size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.dtype().itemsize(),
                                                   storage_offset);
  grow(self.storage(), needed, source.device().index());
  return self;
}

at::Tensor& set_whole_storage(at::Tensor& self, at::Storage source) {
  int64_t count = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, c10::SymIntArrayRef({c10::SymInt(count)}), {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return set_storage(self, source.storage(), source.sym_storage_offset(), source.sym_sizes(), source.sym_strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  int device = self.device().index();
  DeviceScope scope(device);
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  return set_storage(self, storage, 0, c10::SymIntArrayRef({c10::SymInt(0)}), {});
}

// --- fill

// Queue `write` on the alias of self's memory, on the current stream of self's device. `trial` first does
// the same to a one-element host tensor: what the write would raise (a value the dtype cannot hold, a
// dtype the host cannot fill) is raised here, at the call, not at a later synchronize.
template <typename Write>
at::Tensor& queue_write(at::Tensor& self, Write write) {
  {
    BelowAutograd below;
    at::Tensor trial = at::empty({1}, at::TensorOptions().dtype(self.dtype()));
    write(trial);
  }
  if (self.numel() == 0) return self;
  int device = self.device().index();
  at::Tensor alias = host_alias(self);
  BlockRef block = block_of(self);
  enqueue(device, current_stream(device), [alias, block, write] {
    BelowAutograd below;
    Access open({block});
    at::Tensor target = alias;
    write(target);
  });
  return self;
}

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  return queue_write(self, [value](at::Tensor& t) { t.fill_(value); });
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "sim: fill_ takes a 0-dimensional value tensor, got ", value.dim(), " dimensions");
  return fill_scalar(self, (on_sim(value) ? value.cpu() : value).item());
}

at::Tensor& zero(at::Tensor& self) {
  // The host's zero_ on the alias: a memset below at::internal::GRAIN_SIZE elements, a fill above, so a
  // dtype the host cannot fill at scale (bits) fails here as it does on the host. The trial is as large
  // as the path it must take.
  {
    BelowAutograd below;
    at::empty({std::min<int64_t>(self.numel(), at::internal::GRAIN_SIZE)}, at::TensorOptions().dtype(self.dtype()))
        .zero_();
  }
  return queue_write(self, [](at::Tensor& t) { t.zero_(); });
}

// --- copies

// What the copy would raise (dtypes it cannot convert), raised at the call: queued work fails only at a synchronize.
void check_copyable(const at::Tensor& dst, const at::Tensor& src) {
  BelowAutograd below;
  at::empty({1}, at::TensorOptions().dtype(dst.dtype())).copy_(at::empty({1}, at::TensorOptions().dtype(src.dtype())));
}

at::Tensor& copy(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  TORCH_CHECK(on_sim(self) || self.is_cpu(), "sim: copies between sim and the host only, not ", self.device());
  TORCH_CHECK(on_sim(src) || src.is_cpu(), "sim: copies between sim and the host only, not ", src.device());
  if (self.numel() == 0) return self;
  if (src.is_conj() || src.is_neg()) return copy(self, src.resolve_conj().resolve_neg(), non_blocking);
  check_copyable(self, src);
  if (on_sim(self) && on_sim(src)) {  // queued on the destination's current stream, after the source's work
    int device = self.device().index();
    if (src.device().index() != device) synchronize_stream(src.device().index(), current_stream(src.device().index()));
    at::Tensor to = host_alias(self), from = host_alias(src);
    std::vector<BlockRef> blocks{block_of(self), block_of(src)};
    enqueue(device, current_stream(device), [to, from, blocks] {
      BelowAutograd below;
      Access open(blocks);
      to.copy_(from);
    });
    return self;
  }
  const at::Tensor& device_side = on_sim(self) ? self : src;
  const at::Tensor& host_side = on_sim(self) ? src : self;
  int device = device_side.device().index();
  int64_t stream = current_stream(device);
  if (non_blocking && pinned(host_side)) {  // queued: returns before it lands
    at::Tensor to = host_alias(self), from = host_alias(src);
    std::vector<BlockRef> blocks{block_of(self), block_of(src)};
    enqueue(device, stream, [to, from, blocks] {
      BelowAutograd below;
      Access open(blocks);
      to.copy_(from);
    });
    return self;
  }
  // Pageable memory (or a blocking copy): the host waits for the stream, then copies itself.
  synchronize_stream(device, stream);
  BelowAutograd below;
  std::vector<BlockRef> blocks{block_of(device_side)};
  Access open(blocks);
  if (on_sim(self)) {
    host_alias(self).copy_(src);
  } else {
    self.copy_(host_alias(src));
  }
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor out = dst;
  return copy(out, self, non_blocking);
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::Tensor out = dst;
  if (out.sizes() != self.sizes()) out.resize_(self.sizes());
  return copy(out, self, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) { return self.cpu().item(); }

void record_stream(at::Tensor&, at::Stream) {
  // Queued work already holds the memory it touches (memory.cpp): nothing to record.
}

// --- everything else

// Comparisons and reductions a test reads results with: computed on a copy on the host.
const std::set<std::string>& on_the_host() {
  static const std::set<std::string> names{
      "aten::eq", "aten::ne", "aten::lt", "aten::le", "aten::gt", "aten::ge", "aten::equal", "aten::isclose",
      "aten::all", "aten::any", "aten::logical_not", "aten::logical_and", "aten::logical_or", "aten::logical_xor",
      "aten::bitwise_not", "aten::bitwise_and", "aten::bitwise_or", "aten::bitwise_xor", "aten::isnan",
      "aten::isinf", "aten::isfinite", "aten::abs", "aten::neg", "aten::add", "aten::add_", "aten::sub",
      "aten::sub_", "aten::mul", "aten::mul_", "aten::div", "aten::div_", "aten::sum", "aten::max", "aten::min",
      "aten::amax", "aten::amin", "aten::count_nonzero", "aten::nonzero", "aten::masked_select", "aten::where",
      "aten::maximum", "aten::minimum", "aten::sign", "aten::clamp", "aten::clamp_"};
  return names;
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string& name = op.schema().name();
  TORCH_CHECK_NOT_IMPLEMENTED(on_the_host().count(name) > 0, "sim: ", name,
                              " is not implemented on the simulated device: it has allocation, fill, copies and "
                              "views, and a few comparisons and reductions computed on the host (what the "
                              "CpuGpuBuffer contract needs)");
  at::native::cpu_fallback(op, stack);
}

// --- the sim namespace: what the Python module offers beyond torch's API

void sleep_cycles(int64_t cycles) {
  TORCH_CHECK(cycles >= 0, "sim: sleep takes a number of cycles >= 0");
  int device = current_device();
  auto span = std::chrono::duration<double>(static_cast<double>(cycles) / kClockHz);
  enqueue_sleep(device, current_stream(device), span);
}

void check_begin(int64_t device, int64_t stream) { join_check_begin(static_cast<int>(device), stream); }

std::vector<std::string> check_end() { return join_check_end(); }

bool in_use(int64_t device) { return has_context(static_cast<int>(device)); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("resize_", TORCH_FN(resize));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage));
  m.impl("set_.source_Storage", TORCH_FN(set_whole_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
  m.impl("fill_.Tensor", TORCH_FN(fill_tensor));
  m.impl("zero_", TORCH_FN(zero));
  m.impl("copy_", TORCH_FN(copy));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("record_stream", TORCH_FN(record_stream));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>()); }

TORCH_LIBRARY(sim, m) {
  m.def("sleep(int cycles) -> ()", &sleep_cycles);
  m.def("join_check_begin(int device, int stream) -> ()", &check_begin);
  m.def("join_check_end() -> str[]", &check_end);
  m.def("in_use(int device) -> bool", &in_use);
}

}  // namespace sim
