#include "collective/nccl_collective.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#ifdef TRAINYARD_LIBTORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "absl/strings/str_cat.h"

namespace trainyard {

struct NcclCollective::Impl {
  ncclComm_t comm = nullptr;
  int device = 0;
  std::chrono::milliseconds timeout{60000};
  cudaEvent_t done = nullptr;
  bool aborted = false;   // the communicator was aborted (by the rank's own thread)
  CollectiveWatch watch;  // Abort from another thread: seen by the wait loop
};

namespace {

absl::StatusOr<ncclDataType_t> NcclType(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat32:
      return ncclFloat32;
    case torch::kFloat64:
      return ncclFloat64;
    case torch::kFloat16:
      return ncclFloat16;
    case torch::kBFloat16:
      return ncclBfloat16;
    case torch::kInt32:
      return ncclInt32;
    case torch::kInt64:
      return ncclInt64;
    case torch::kUInt8:
      return ncclUint8;
    case torch::kInt8:
      return ncclInt8;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL cannot reduce tensors of type ", c10::toString(t.scalar_type())));
  }
}

cudaStream_t CurrentStream(int device) {
#ifdef TRAINYARD_LIBTORCH_CUDA
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
#else
  (void)device;
  return nullptr;  // the legacy default stream
#endif
}

absl::Status NcclError(const char* what, ncclResult_t r) {
  const std::string message = absl::StrCat(what, ": ", ncclGetErrorString(r));
  if (r == ncclInvalidArgument || r == ncclInvalidUsage) return absl::InvalidArgumentError(message);
  return absl::UnavailableError(message);
}

absl::Status CudaError(const char* what, cudaError_t e) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCollective>> NcclCollective::Create(int rank, int world_size,
                                                                       std::shared_ptr<Store> store,
                                                                       const NcclOptions& options) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in [0, ", world_size, ")"));
  }
  if (store == nullptr) return absl::InvalidArgumentError("no store");
  std::unique_ptr<NcclCollective> c(new NcclCollective);
  c->rank_ = rank;
  c->world_size_ = world_size;
  c->impl_ = std::make_unique<Impl>();
  c->impl_->device = options.device;
  c->impl_->timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout));
  if (cudaError_t e = cudaSetDevice(options.device); e != cudaSuccess) return CudaError("cudaSetDevice", e);
  if (cudaError_t e = cudaEventCreateWithFlags(&c->impl_->done, cudaEventDisableTiming); e != cudaSuccess) {
    return CudaError("cudaEventCreate", e);
  }
  ncclUniqueId id;
  const std::string key = "nccl_unique_id";
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return NcclError("ncclGetUniqueId", r);
    absl::Status s = store->Set(key, std::string(id.internal, sizeof(id.internal)));
    if (!s.ok()) return s;
  } else {
    absl::StatusOr<std::string> value = store->Get(key, options.timeout);
    if (!value.ok()) return value.status();
    if (value->size() != sizeof(id.internal)) {
      return absl::DataLossError(absl::StrCat("the NCCL unique id in the store has ", value->size(), " bytes"));
    }
    std::copy(value->begin(), value->end(), id.internal);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = ncclCommInitRankConfig(&c->impl_->comm, world_size, id, rank, &config);
  const auto deadline = std::chrono::steady_clock::now() + c->impl_->timeout;
  while (r == ncclInProgress || r == ncclSuccess) {
    ncclResult_t state;
    if (ncclResult_t q = ncclCommGetAsyncError(c->impl_->comm, &state); q != ncclSuccess) {
      r = q;
      break;
    }
    if (state == ncclSuccess) return c;
    if (state != ncclInProgress) {
      r = state;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(c->impl_->comm);
      c->impl_->comm = nullptr;
      return absl::DeadlineExceededError(
          absl::StrCat("joining the NCCL group: not every rank arrived within ", c->impl_->timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (c->impl_->comm != nullptr) ncclCommAbort(c->impl_->comm);
  c->impl_->comm = nullptr;
  return NcclError("ncclCommInitRankConfig", r);
}

void NcclCollective::Abort(absl::string_view reason) { impl_->watch.Abort(reason); }

CollectiveProgress NcclCollective::Progress() const { return impl_->watch.Progress(); }

NcclCollective::~NcclCollective() {
  if (impl_ == nullptr) return;
  // An aborted communicator was freed by its ncclCommAbort already.
  if (impl_->comm != nullptr && !impl_->aborted) {
    ncclCommFinalize(impl_->comm);
    ncclCommDestroy(impl_->comm);
  }
  if (impl_->done != nullptr) cudaEventDestroy(impl_->done);
}

namespace {

// Enqueues `enqueue` (NCCL calls inside a group) on the current stream and
// waits until it is done, a peer fails, or the timeout passes.
template <typename F>
absl::Status RunGroup(NcclCollective* self, ncclComm_t comm, cudaEvent_t done, int device,
                      std::chrono::milliseconds timeout, bool* aborted, CollectiveWatch* watch, const char* what,
                      F enqueue) {
  if (watch->aborted()) {
    if (comm != nullptr && !*aborted) ncclCommAbort(comm);
    *aborted = true;
    return watch->AbortedError(what);
  }
  if (comm == nullptr || *aborted) return absl::FailedPreconditionError("the NCCL communicator was aborted");
  cudaStream_t stream = CurrentStream(device);
  ncclGroupStart();
  absl::Status s = enqueue(stream);
  ncclResult_t r = ncclGroupEnd();
  if (!s.ok()) return s;
  if (r != ncclSuccess && r != ncclInProgress) return NcclError(what, r);
  if (cudaError_t e = cudaEventRecord(done, stream); e != cudaSuccess) return CudaError("cudaEventRecord", e);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  CollectiveWatch::Waiting waiting(watch);
  while (true) {
    if (watch->aborted()) {
      ncclCommAbort(comm);
      *aborted = true;
      return watch->AbortedError(what);
    }
    cudaError_t e = cudaEventQuery(done);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return CudaError(what, e);
    ncclResult_t async;
    if (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
      ncclCommAbort(comm);
      *aborted = true;
      return NcclError(what, async);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(comm);
      *aborted = true;
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out after ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  (void)self;
}

absl::Status CheckDevice(const torch::Tensor& t, int device) {
  if (!t.is_cuda() || t.device().index() != device) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL needs tensors on cuda:", device, "; got one on ", t.device().str()));
  }
  if (!t.is_contiguous()) return absl::InvalidArgumentError("NCCL needs contiguous tensors");
  return absl::OkStatus();
}

// Small host tensors (step counts, stop flags, metric totals) travel
// through the device: `staged` holds, for each tensor, the one NCCL works
// on (a device copy of a CPU tensor, else the tensor itself); CopyBack
// writes the results into the CPU originals.
absl::Status Stage(std::vector<torch::Tensor>& tensors, int device, std::vector<torch::Tensor>* staged) {
  staged->clear();
  for (const torch::Tensor& t : tensors) {
    if (t.device().is_cpu()) {
      staged->push_back(t.contiguous().to(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(device))));
    } else {
      if (absl::Status s = CheckDevice(t, device); !s.ok()) return s;
      staged->push_back(t);
    }
    if (absl::StatusOr<ncclDataType_t> type = NcclType(staged->back()); !type.ok()) return type.status();
  }
  return absl::OkStatus();
}

void CopyBack(std::vector<torch::Tensor>& tensors, const std::vector<torch::Tensor>& staged) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].device().is_cpu()) tensors[i].copy_(staged[i].view(tensors[i].sizes()));
  }
}

}  // namespace

absl::Status NcclCollective::AllReduce(std::vector<torch::Tensor>& originals, ReduceOp op) {
  if (originals.empty()) return absl::OkStatus();
  const ncclRedOp_t nccl_op = op == ReduceOp::kSum ? ncclSum : op == ReduceOp::kMax ? ncclMax : ncclMin;
  std::vector<torch::Tensor> tensors;
  if (absl::Status s = Stage(originals, impl_->device, &tensors); !s.ok()) return s;
  // One group: NCCL fuses the per-tensor calls.
  absl::Status status = RunGroup(this, impl_->comm, impl_->done, impl_->device, impl_->timeout, &impl_->aborted,
                                 &impl_->watch, "all-reduce", [&](cudaStream_t stream) {
                                   for (torch::Tensor& t : tensors) {
                                     ncclResult_t r =
                                         ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                                                       *NcclType(t), nccl_op, impl_->comm, stream);
                                     if (r != ncclSuccess && r != ncclInProgress) return NcclError("ncclAllReduce", r);
                                   }
                                   return absl::OkStatus();
                                 });
  if (status.ok()) CopyBack(originals, tensors);
  return status;
}

absl::Status NcclCollective::Broadcast(std::vector<torch::Tensor>& originals, int root) {
  if (root < 0 || root >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " out of range"));
  }
  std::vector<torch::Tensor> tensors;
  if (absl::Status s = Stage(originals, impl_->device, &tensors); !s.ok()) return s;
  absl::Status status = RunGroup(this, impl_->comm, impl_->done, impl_->device, impl_->timeout, &impl_->aborted,
                                 &impl_->watch, "broadcast", [&](cudaStream_t stream) {
                                   for (torch::Tensor& t : tensors) {
                                     ncclResult_t r =
                                         ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                                                       *NcclType(t), root, impl_->comm, stream);
                                     if (r != ncclSuccess && r != ncclInProgress) return NcclError("ncclBroadcast", r);
                                   }
                                   return absl::OkStatus();
                                 });
  if (status.ok()) CopyBack(originals, tensors);
  return status;
}

absl::Status NcclCollective::AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) {
  const bool on_host = input.device().is_cpu();
  torch::Tensor in =
      on_host ? input.contiguous().to(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(impl_->device)))
              : input.contiguous();
  if (absl::Status s = CheckDevice(in, impl_->device); !s.ok()) return s;
  absl::StatusOr<ncclDataType_t> type = NcclType(in);
  if (!type.ok()) return type.status();
  std::vector<int64_t> shape = {world_size_};
  for (int64_t d : in.sizes()) shape.push_back(d);
  torch::Tensor gathered = torch::empty(shape, in.options());
  absl::Status s = RunGroup(this, impl_->comm, impl_->done, impl_->device, impl_->timeout, &impl_->aborted,
                            &impl_->watch, "all-gather", [&](cudaStream_t stream) {
                              ncclResult_t r =
                                  ncclAllGather(in.data_ptr(), gathered.data_ptr(), static_cast<size_t>(in.numel()),
                                                *type, impl_->comm, stream);
                              if (r != ncclSuccess && r != ncclInProgress) return NcclError("ncclAllGather", r);
                              return absl::OkStatus();
                            });
  if (!s.ok()) return s;
  outputs->clear();
  if (on_host) gathered = gathered.to(torch::kCPU);
  for (int r = 0; r < world_size_; ++r) outputs->push_back(gathered[r]);
  return absl::OkStatus();
}

absl::Status NcclCollective::Barrier() {
  std::vector<torch::Tensor> one = {
      torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA, impl_->device))};
  return AllReduce(one, ReduceOp::kSum);
}

absl::Status NcclCollective::ReduceScatter(torch::Tensor input, const std::vector<int64_t>& counts,
                                           torch::Tensor output, ReduceOp op) {
  if (absl::Status s = CheckReduceScatter(input, counts, output, rank_, world_size_); !s.ok()) return s;
  if (absl::Status s = CheckDevice(input, impl_->device); !s.ok()) return s;
  absl::StatusOr<ncclDataType_t> type = NcclType(input);
  if (!type.ok()) return type.status();
  const ncclRedOp_t nccl_op = op == ReduceOp::kSum ? ncclSum : op == ReduceOp::kMax ? ncclMax : ncclMin;
  const int64_t largest = *std::max_element(counts.begin(), counts.end());
  const std::vector<int64_t> offsets = ShardOffsets(counts);
  torch::Tensor padded = torch::zeros({largest * world_size_}, input.options());
  for (int r = 0; r < world_size_; ++r) {
    padded.narrow(0, r * largest, counts[r]).copy_(input.narrow(0, offsets[r], counts[r]));
  }
  torch::Tensor mine = torch::empty({largest}, input.options());
  absl::Status status =
      RunGroup(this, impl_->comm, impl_->done, impl_->device, impl_->timeout, &impl_->aborted, &impl_->watch,
               "reduce-scatter", [&](cudaStream_t stream) {
                 ncclResult_t r = ncclReduceScatter(padded.data_ptr(), mine.data_ptr(), static_cast<size_t>(largest),
                                                    *type, nccl_op, impl_->comm, stream);
                 if (r != ncclSuccess && r != ncclInProgress) return NcclError("ncclReduceScatter", r);
                 return absl::OkStatus();
               });
  if (!status.ok()) return status;
  output.copy_(mine.narrow(0, 0, counts[rank_]));
  return absl::OkStatus();
}

absl::Status NcclCollective::AllGatherV(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output) {
  if (absl::Status s = CheckAllGatherV(input, counts, output, rank_, world_size_); !s.ok()) return s;
  if (absl::Status s = CheckDevice(input, impl_->device); !s.ok()) return s;
  absl::StatusOr<ncclDataType_t> type = NcclType(input);
  if (!type.ok()) return type.status();
  const int64_t largest = *std::max_element(counts.begin(), counts.end());
  torch::Tensor mine = torch::zeros({largest}, input.options());
  mine.narrow(0, 0, counts[rank_]).copy_(input);
  torch::Tensor gathered = torch::empty({largest * world_size_}, input.options());
  absl::Status status = RunGroup(this, impl_->comm, impl_->done, impl_->device, impl_->timeout, &impl_->aborted,
                                 &impl_->watch, "all-gather", [&](cudaStream_t stream) {
                                   ncclResult_t r =
                                       ncclAllGather(mine.data_ptr(), gathered.data_ptr(), static_cast<size_t>(largest),
                                                     *type, impl_->comm, stream);
                                   if (r != ncclSuccess && r != ncclInProgress) return NcclError("ncclAllGather", r);
                                   return absl::OkStatus();
                                 });
  if (!status.ok()) return status;
  const std::vector<int64_t> offsets = ShardOffsets(counts);
  for (int r = 0; r < world_size_; ++r) {
    output.narrow(0, offsets[r], counts[r]).copy_(gathered.narrow(0, r * largest, counts[r]));
  }
  return absl::OkStatus();
}

}  // namespace trainyard
