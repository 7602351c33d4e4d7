#include "train/parallel/flat_param.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/StorageImpl.h>

namespace ctune::train {

namespace {

// Gathering only moves bytes, so bfloat16 travels as float16 bits (Gloo in LibTorch 1.13 takes
// neither bfloat16 nor int16).
at::Tensor as_gatherable(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 ? t.view(at::kHalf) : t; }

}  // namespace

FlatParam::FlatParam(std::vector<at::Tensor> params, std::vector<std::size_t> indices, const distributed::Comm& comm, bool keep_whole,
                     bool offload)
    : params_(std::move(params)), indices_(std::move(indices)), rank_(comm.rank()), ranks_(comm.size()), keep_whole_(keep_whole) {
  at::NoGradGuard no_grad;
  TORCH_CHECK(!params_.empty(), "a flat parameter needs parameters");
  const auto dtype = params_.front().scalar_type();
  for (const auto& p : params_) {
    TORCH_CHECK(p.scalar_type() == dtype, "one flat parameter holds one dtype: ", dtype, " and ", p.scalar_type());
    numel_ += p.numel();
  }
  chunk_ = std::max<std::int64_t>(1, (numel_ + ranks_ - 1) / ranks_);
  whole_ = at::zeros({chunk_ * ranks_}, params_.front().options().requires_grad(false));
  // Re-seat each parameter as a view of the buffer: the model computes with the same values,
  // and whatever fills the buffer fills the parameters.
  std::int64_t offset = 0;
  for (auto& p : params_) {
    at::Tensor view = whole_.narrow(0, offset, p.numel()).view(p.sizes());
    view.copy_(p);
    p.set_data(view);
    offsets_.push_back(offset);
    offset += p.numel();
  }
  shard_ = whole_.narrow(0, rank_ * chunk_, chunk_);
  if (!keep_whole_) {
    shard_ = offload ? shard_.to(at::kCPU, /*non_blocking=*/false, /*copy=*/true) : shard_.clone();
    if (offload && whole_.is_cuda()) shard_ = shard_.pin_memory();  // for asynchronous copies
    release();
  }
}

void FlatParam::gather(distributed::Comm& comm, const char* what) {
  start_gather(comm, what);
  finish_gather();
}

void FlatParam::start_gather(distributed::Comm& comm, const char* what) {
  finish_gather();
  if (!gathered_) {
    auto* storage = whole_.storage().unsafeGetStorageImpl();
    const auto bytes = static_cast<std::size_t>(whole_bytes());
    storage->set_data_ptr_noswap(storage->allocator()->allocate(bytes));
    storage->set_nbytes(bytes);
    gathered_ = true;
  }
  whole_view_ = as_gatherable(whole_);
  const at::Tensor mine = keep_whole_ ? shard_.clone() : shard_.to(whole_.device(), /*non_blocking=*/true);
  pending_ = comm.all_gather_async(as_gatherable(mine), whole_view_, what);
}

void FlatParam::release() {
  if (keep_whole_ || !gathered_) return;
  finish_gather();
  auto* storage = whole_.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, whole_.device()));
  storage->set_nbytes(0);
  gathered_ = false;
}

bool FlatParam::has_gradients() const {
  for (const auto& p : params_)
    if (p.grad().defined()) return true;
  return false;
}

void FlatParam::reduce_scatter_gradients(distributed::Comm& comm, distributed::Comm* replicas) {
  at::NoGradGuard no_grad;
  at::Tensor flat = at::zeros({chunk_ * ranks_}, at::kFloat);
  std::int64_t offset = 0;
  for (auto& p : params_) {
    // Every rank runs the same graph, so the same gradients are defined on every rank.
    if (p.grad().defined()) flat.narrow(0, offset, p.numel()).copy_(p.grad().reshape({-1}));
    p.mutable_grad() = at::Tensor();
    offset += p.numel();
  }
  at::Tensor mine = comm.reduce_scatter_sum(flat, "reduce-scattering gradients");
  if (replicas != nullptr) replicas->all_reduce_sum(mine, "summing gradient shards over nodes");
  mine = mine.to(shard_.device(), shard_.scalar_type());
  at::Tensor& grad = shard_.mutable_grad();
  if (grad.defined()) {
    grad.add_(mine);
  } else {
    grad = mine;
  }
}

void FlatParam::reduce_scatter_gradient_of(std::size_t k, distributed::Comm& comm, distributed::Comm* replicas) {
  at::NoGradGuard no_grad;
  at::Tensor& whole_grad = params_[k].mutable_grad();
  const std::int64_t begin = offsets_[k], end = begin + params_[k].numel();
  // Rank r's share: the parameter's elements inside chunk r, [max(begin, r c), min(end, (r+1) c)).
  std::vector<std::int64_t> splits;
  for (int r = 0; r < ranks_; ++r) {
    splits.push_back(std::max<std::int64_t>(0, std::min(end, (r + 1) * chunk_) - std::max(begin, r * chunk_)));
  }
  at::Tensor flat = whole_grad.defined() ? whole_grad.reshape({-1}).to(at::kFloat) : at::zeros({end - begin}, at::kFloat);
  whole_grad = at::Tensor();
  at::Tensor mine = comm.reduce_scatter_sum(flat, splits, "reduce-scattering gradients");
  // Every rank of a replica group holds the same chunk, so the same share.
  if (replicas != nullptr && mine.numel() > 0) replicas->all_reduce_sum(mine, "summing gradient shards over nodes");
  at::Tensor& grad = shard_.mutable_grad();
  if (!grad.defined()) grad = at::zeros({chunk_}, shard_.options());
  if (mine.numel() > 0) {
    const std::int64_t at_ = std::max(begin, rank_ * chunk_) - rank_ * chunk_;
    grad.narrow(0, at_, mine.numel()).add_(mine.to(shard_.device(), shard_.scalar_type()));
  }
}

std::vector<FlatParam::Piece> FlatParam::pieces_of(const at::Tensor& chunk_like) const {
  TORCH_CHECK(chunk_like.numel() == chunk_, "a tensor laid out like the chunk has ", chunk_, " elements, found ", chunk_like.numel());
  const at::Tensor flat = chunk_like.reshape({-1});
  const std::int64_t first = rank_ * chunk_, last = first + chunk_;
  std::vector<Piece> out;
  for (std::size_t k = 0; k < params_.size(); ++k) {
    const std::int64_t begin = std::max(first, offsets_[k]), end = std::min(last, offsets_[k] + params_[k].numel());
    if (begin < end) out.push_back({k, begin - offsets_[k], flat.narrow(0, begin - first, end - begin)});
  }
  return out;
}

}  // namespace ctune::train
