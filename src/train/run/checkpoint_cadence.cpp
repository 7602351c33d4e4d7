#include "train/run/checkpoint_cadence.h"

#include <cstring>

#include <spdlog/spdlog.h>

#include "report/html_report.h"

namespace ctune::train {
namespace {

// One rank's source state as bytes: the length of a JSON header (the note; each tensor's name,
// dtype, shape and byte offset), the header, then the tensors' bytes.
at::Tensor pack(const SourceState& state) {
  Json header = {{"note", state.note}, {"tensors", Json::array()}};
  std::vector<at::Tensor> parts;
  std::int64_t offset = 0;
  for (const auto& [name, tensor] : state.tensors) {
    parts.push_back(tensor.cpu().contiguous());
    header["tensors"].push_back({name, static_cast<int>(parts.back().scalar_type()), parts.back().sizes().vec(), offset});
    offset += static_cast<std::int64_t>(parts.back().nbytes());
  }
  const std::string text = header.dump();
  const auto head = static_cast<std::int64_t>(sizeof(std::uint64_t) + text.size());
  auto out = at::empty({head + offset}, at::kByte);
  auto* p = out.data_ptr<std::uint8_t>();
  const std::uint64_t length = text.size();
  std::memcpy(p, &length, sizeof length);
  std::memcpy(p + sizeof length, text.data(), text.size());
  for (std::size_t i = 0; i < parts.size(); ++i)
    std::memcpy(p + head + header["tensors"][i][3].get<std::int64_t>(), parts[i].data_ptr(), parts[i].nbytes());
  return out;
}

SourceState unpack(const std::uint8_t* p) {
  std::uint64_t length = 0;
  std::memcpy(&length, p, sizeof length);
  const Json header = Json::parse(std::string(reinterpret_cast<const char*>(p + sizeof length), length));
  const std::uint8_t* data = p + sizeof length + length;
  SourceState s;
  s.note = header["note"];
  for (const auto& t : header["tensors"]) {
    auto tensor = at::empty(t[2].get<std::vector<std::int64_t>>(), at::TensorOptions().dtype(static_cast<at::ScalarType>(t[1].get<int>())));
    std::memcpy(tensor.data_ptr(), data + t[3].get<std::int64_t>(), tensor.nbytes());
    s.tensors.emplace_back(t[0].get<std::string>(), tensor);
  }
  return s;
}

// What `source` holds, every rank's gathered (all ranks call it: it is a collective under
// several ranks); see CheckpointSources::source_state.
SourceState gathered_source_state(const BatchSource* source, distributed::Comm& comm) {
  if (!source) return {};
  SourceState mine = source->state();
  if (comm.size() == 1) return mine;
  const char* what = "gathering the ranks' pending generation batches for a checkpoint";
  const at::Tensor bytes = pack(mine);
  auto lengths = at::empty({comm.size()}, at::kLong);
  comm.all_gather(at::tensor({bytes.numel()}, at::kLong), lengths, what);
  const auto longest = lengths.max().item<std::int64_t>();
  auto padded = at::zeros({longest}, at::kByte);
  padded.narrow(0, 0, bytes.numel()).copy_(bytes);
  auto all = at::empty({comm.size() * longest}, at::kByte);
  comm.all_gather(padded, all, what);
  SourceState out;
  Json notes = Json::array();
  bool held = false;
  for (int r = 0; r < comm.size(); ++r) {
    SourceState part = unpack(all.data_ptr<std::uint8_t>() + r * longest);
    held = held || !part.note.is_null();
    notes.push_back(part.note);
    for (auto& [name, tensor] : part.tensors) out.tensors.emplace_back("r" + std::to_string(r) + "." + name, tensor);
  }
  if (held) out.note = {{"ranks", notes}};
  return out;
}

}  // namespace

CheckpointCadence::CheckpointCadence(const RunPlan& plan, CheckpointManager& manager, CheckpointSources& sources, DataParallel& parallel,
                                     model::CausalLM& model, distributed::Comm& comm, std::int64_t last_written)
    : plan_(plan), manager_(manager), sources_(sources), parallel_(parallel), model_(model), comm_(comm), last_written_(last_written) {}

void CheckpointCadence::after_step(std::int64_t step) {
  const auto every = plan_.checkpoint.every_n_steps;
  if ((every > 0 && step % every == 0) || step == plan_.trainer.max_steps) write(step);
}

void CheckpointCadence::ensure(std::int64_t step) {
  if (last_written_ != step) write(step);
}

void CheckpointCadence::write_report() const {
  if (comm_.rank() != 0) return;
  try {
    report::write_report(plan_.output_dir);
  } catch (const std::exception& e) {
    spdlog::warn("report.html not written: {}", e.what());
  }
}

// A sharded checkpoint holds each rank's part, written by that rank. A whole one is rank 0's:
// the weights are whole on every rank (gathered under full_shard) and every rank takes part in
// gathering the optimizer state.
void CheckpointCadence::write(std::int64_t step) {
  sources_.source_state = gathered_source_state(sources_.source, comm_);
  if (plan_.checkpoint.sharded) {
    manager_.write_sharded(step, sources_, plan_.model_config,
                           {parallel_.state_shard(model_), parallel_.shard_index, parallel_.shard_count}, comm_);
  } else {
    sources_.optimizer_state = parallel_.optimizer->state();
    parallel_.with_whole_model([&] {
      if (comm_.rank() == 0) manager_.write(step, sources_);
    });
    sources_.optimizer_state.clear();
  }
  sources_.source_state = {};
  write_report();
  comm_.barrier("waiting for rank 0 to write a checkpoint");
  last_written_ = step;
}

}  // namespace ctune::train
