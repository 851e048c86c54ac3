// The Collective over NCCL, for CUDA tensors: operations are enqueued on the
// current CUDA stream (LibTorch's, when LibTorch is built with CUDA; the
// default stream otherwise) and waited for with a bound, so that a peer that
// never arrives gives kDeadlineExceeded (the communicator is then aborted)
// instead of a hang. Rank 0 makes the NCCL unique id and hands it out
// through the rendezvous Store.
//
// Built only with --config=cuda (the CUDA toolkit and NCCL); runs only where
// a GPU is present. Thread-safety: one thread per rank.
#ifndef TRAINYARD_COLLECTIVE_NCCL_COLLECTIVE_H_
#define TRAINYARD_COLLECTIVE_NCCL_COLLECTIVE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/collective.h"
#include "collective/store.h"

namespace trainyard {

struct NcclOptions {
  int device = 0;  // the CUDA device of this rank
  absl::Duration timeout = absl::Seconds(60);
};

class NcclCollective : public Collective {
 public:
  // Joins the group (non-blocking communicator initialisation, bounded by
  // the timeout).
  static absl::StatusOr<std::unique_ptr<NcclCollective>> Create(int rank, int world_size, std::shared_ptr<Store> store,
                                                                const NcclOptions& options);
  ~NcclCollective() override;
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  // Tensors on this rank's CUDA device are reduced in place; CPU tensors
  // (small control values) are copied through the device and back.
  // kInvalidArgument for a tensor on another device or of a type NCCL does
  // not reduce.
  absl::Status AllReduce(std::vector<torch::Tensor>& tensors, ReduceOp op) override;
  absl::Status Broadcast(std::vector<torch::Tensor>& tensors, int root) override;
  absl::Status AllGather(const torch::Tensor& input, std::vector<torch::Tensor>* outputs) override;
  absl::Status Barrier() override;
  // The rank's thread sees it in its wait loop and aborts the communicator
  // (ncclCommAbort), as a timeout does.
  void Abort(absl::string_view reason) override;
  CollectiveProgress Progress() const override;
  // ncclReduceScatter / ncclAllGather take equal shards: uneven ones are
  // padded to the largest in a device buffer (tensors on this rank's device).
  absl::Status ReduceScatter(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output,
                             ReduceOp op) override;
  absl::Status AllGatherV(torch::Tensor input, const std::vector<int64_t>& counts, torch::Tensor output) override;

 private:
  NcclCollective() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int world_size_ = 1;
};

}  // namespace trainyard

#endif  // TRAINYARD_COLLECTIVE_NCCL_COLLECTIVE_H_
