// Parameters of one dtype packed into one flat buffer and sharded over the ranks, as FSDP's
// FlatParameter: each parameter is re-seated as a view of the buffer, the buffer holds
// chunk x ranks elements (the last chunk padded with zeros), and rank r owns chunk r.
//
// A flat either keeps its whole buffer for good (shard_grad_op: the shard is a view of it) or
// holds only its shard between uses (full_shard): release() frees the buffer's storage while
// the parameters and any autograd graph keep their views of it, and gather() allocates the
// storage again and fills it from every rank's shard, so the same views see whole values again
// (FSDP frees and refills storage the same way). See docs/distributed.md.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "distributed/comm.h"

namespace ctune::train {

class FlatParam {
 public:
  // `params`: one dtype; `indices`: each parameter's number in one process's optimizer
  // numbering (empty for frozen parameters). With keep_whole false the buffer starts released.
  // With `offload` the shard (and so its gradient and optimizer state) lives in host memory
  // (distributed.cpu_offload): gathering copies it to the parameters' device and reduced
  // gradients come back to the host. On a CPU build host and device are one memory.
  FlatParam(std::vector<at::Tensor> params, std::vector<std::size_t> indices, const distributed::Comm& comm, bool keep_whole,
            bool offload = false);

  // This rank's chunk [chunk] (for trainable flats, the parameter the optimizer updates).
  const at::Tensor& shard() const { return shard_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<std::size_t>& indices() const { return indices_; }
  std::int64_t numel() const { return numel_; }
  std::int64_t chunk() const { return chunk_; }
  bool gathered() const { return gathered_; }
  std::int64_t whole_bytes() const { return chunk_ * ranks_ * static_cast<std::int64_t>(shard_.element_size()); }

  // The whole buffer from every rank's shard (the parameters hold whole values afterwards).
  void gather(distributed::Comm& comm, const char* what);
  // The same in two halves: start_gather() allocates the buffer and starts the all-gather;
  // finish_gather() waits for it (a no-op when none is under way).
  void start_gather(distributed::Comm& comm, const char* what);
  void finish_gather() { pending_.wait(); }
  // Frees the whole buffer's storage (not for keep_whole flats), after any gather under way.
  void release();
  // True when some parameter holds a gradient not yet reduced.
  bool has_gradients() const;
  // The parameters' gradients summed over ranks, added to this rank's chunk of them (the
  // shard's gradient); the parameters' own gradients are released. With `replicas` (the ranks
  // holding the same chunk in other nodes: hybrid_shard) the chunk is then summed over them.
  void reduce_scatter_gradients(distributed::Comm& comm, distributed::Comm* replicas = nullptr);
  // The same for parameter `k` alone, as soon as its gradient is complete (full_shard): each
  // rank receives the sum of its chunk's share of that parameter, so only one parameter's
  // whole gradient exists at a time.
  void reduce_scatter_gradient_of(std::size_t k, distributed::Comm& comm, distributed::Comm* replicas);

  // What a tensor laid out like this rank's chunk (the shard itself, or optimizer state of it)
  // holds of each parameter: parameter `k`'s flattened elements [offset, offset + data.numel()),
  // as 1-D views of `chunk_like`. Parameters outside the chunk and the padding are left out.
  struct Piece {
    std::size_t k = 0;
    std::int64_t offset = 0;
    at::Tensor data;
  };
  std::vector<Piece> pieces_of(const at::Tensor& chunk_like) const;

 private:
  std::vector<at::Tensor> params_;
  std::vector<std::size_t> indices_;
  int rank_ = 0, ranks_ = 1;
  bool keep_whole_ = true;
  bool gathered_ = true;
  std::int64_t numel_ = 0, chunk_ = 0;
  std::vector<std::int64_t> offsets_;  // each parameter's first element in the buffer
  at::Tensor whole_;  // [chunk * ranks]
  at::Tensor whole_view_;  // what the gather under way writes to
  distributed::Comm::Pending pending_;
  at::Tensor shard_;  // [chunk]
};

}  // namespace ctune::train
