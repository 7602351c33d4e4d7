// Fully sharded parameters (distributed.strategy full_shard, as ZeRO-3 / FSDP FULL_SHARD): every
// parameter of the model, trainable or frozen, lives on each rank only as its 1/N chunk of a
// flat parameter (train/parallel/flat_param.h), one set of flats per part of the model (the embedding,
// each block, the final norm with the output head). A part's whole parameters exist only while
// it computes:
//   forward:  gathered in enter(), freed in leave();
//   backward: gathered again just before the part's backward (an autograd node on the part's
//             output) and freed after it (a node on the part's input; or at the end of
//             backward, flush(), for a part whose input needs no gradient, such as the first
//             block of a LoRA run, and the embedding).
// Each trainable parameter's gradient is reduce-scattered into this rank's chunk the moment
// autograd has accumulated it (a hook after the parameter's AccumulateGrad node, as FSDP does),
// so no more than one parameter's whole gradient exists at a time. With experts, a part's
// gradients are reduced together after its backward (one part's whole gradients at a time).
// The final norm and head are not freed after forward: their backward comes next.
// With prefetch, entering a part in forward starts the next part's gather, and a part's backward
// starts the gather of the part before it, so communication overlaps computation (at the cost
// of two parts whole at once).
// Every rank runs the same graph (a rank without rows computes on an idle batch,
// train/parallel/data_parallel.h), so every rank issues the same collectives in the same order.
// See docs/distributed.md.
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include <torch/csrc/autograd/function.h>

#include "distributed/comm.h"
#include "model/decoder.h"
#include "model/param_scopes.h"
#include "train/parallel/zero.h"
#include "train/step/optimizer.h"

namespace ctune::train {

class FullShard : public model::ParamScopes, public std::enable_shared_from_this<FullShard> {
 public:
  // Shards every parameter of `model` over `comm`; `groups` are its trainable parameters as one
  // process's optimizer numbers them (with their weight decay). With `replicas` (hybrid_shard:
  // `comm` is this node's ranks, `replicas` the ranks of other nodes holding the same chunks)
  // reduced gradients are also summed across nodes. Install with install().
  struct Options {
    bool offload = false;  // the shards in host memory (FlatParam)
    bool prefetch = false;  // the next part's gather started while this one computes
  };
  FullShard(model::CausalLM& model, const std::vector<ParamGroup>& groups, distributed::Comm& comm, distributed::Comm* replicas, Options options);
  void install(model::CausalLM& model) { model->model->scopes = shared_from_this(); }

  // The trainable flats, for the optimizer (which steps their shards).
  std::vector<FlatGroup> trainable();

  at::Tensor enter(std::int64_t scope, const at::Tensor& x) override;
  at::Tensor leave(std::int64_t scope, const at::Tensor& y) override;
  void pre_backward(std::int64_t scope);
  void post_backward(std::int64_t scope);
  // Parameter `k` of `flat` has its whole gradient for this backward.
  void gradient_ready(FlatParam& flat, std::size_t k);
  // End of backward: gradients no node reduced, reduce-scattered; every part freed.
  void flush();
  // The whole model on this rank (to write a checkpoint or the result, or to generate), and
  // back. Between the two, forwards keep it whole: they gather and free nothing, so a rank may
  // run a different number of them (a generation loop) without a collective.
  void gather_all();
  void release_all() override;

  // Called while a part is whole in backward (before its gradients are reduced): a memory
  // meter hooks here.
  std::function<void()> sample_memory;

 private:
  struct Part {
    std::vector<std::shared_ptr<FlatParam>> flats;
    std::vector<double> weight_decay;  // per flat; frozen flats: 0
    std::vector<bool> trainable;
  };
  struct Numbering {  // a trainable parameter's group and one-process optimizer index
    std::size_t group = 0, index = 0;
  };
  using NumberingMap = std::unordered_map<const void*, Numbering>;  // by TensorImpl
  Part make_part(const std::vector<at::Tensor>& params, const std::vector<ParamGroup>& groups, const NumberingMap& numbering);
  std::vector<Part*> parts_of(std::int64_t scope);
  std::vector<Part*> all_parts();  // in forward order
  void gather(Part& part);        // whole now (finishing a prefetch under way)
  void prefetch(std::int64_t scope);  // the gathers of `scope`'s parts started (with options_.prefetch)
  static void release(Part& part);
  // Reduce-scatters the gradients of those trainable `flats` that hold one on some rank.
  void reduce_agreed(const std::vector<FlatParam*>& flats, const char* what);

  distributed::Comm& comm_;
  distributed::Comm* replicas_;
  Options options_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive: they carry the hooks
  Part embedding_, head_;
  std::vector<Part> blocks_;
  bool tied_ = false;
  bool whole_ = false;  // gather_all() until release_all(): forwards leave the parts whole
  bool reduce_by_part_ = false;  // a model with experts: gradients reduced per part (see the constructor)
};

}  // namespace ctune::train
