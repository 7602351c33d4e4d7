// libctune_spm.so: the C interface of spm_shim.h over sentencepiece::SentencePieceProcessor.
// Every entry point catches all exceptions; errors are reported through return values and a
// thread-local message, so nothing but plain C data crosses the dlopen boundary.
#include "tokenizer/spm_shim.h"

#include <sentencepiece_processor.h>

#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

struct ctune_spm {
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

thread_local std::string g_last_error;

// Models still alive when the process exits are freed by the registry's destructor. It is
// created right after the first model loads, hence destroyed before SentencePiece's and
// protobuf's own static objects, which a model's destructor still needs; a handle freed after
// that (by a tokenizer that outlives the registry, say one held in a static) is left alone.
bool g_shut_down = false;  // trivially destructible: valid until the library is unmapped

struct Registry {
  std::mutex mutex;
  std::unordered_set<ctune_spm*> live;
  ~Registry() {
    for (ctune_spm* h : live) delete h;
    live.clear();
    g_shut_down = true;
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

long fail(const std::string& message) {
  g_last_error = message;
  return -1;
}

template <typename T>
long copy_out(const T* data, std::size_t n, T* out, std::size_t cap) {
  if (out && n <= cap && n > 0) std::memcpy(out, data, n * sizeof(T));
  return static_cast<long>(n);
}

bool valid_id(const ctune_spm* h, int32_t id) {
  return id >= 0 && id < h->processor.GetPieceSize();
}

}  // namespace

extern "C" {

ctune_spm* ctune_spm_load(const char* path, char* err, size_t err_cap) {
  try {
    auto* h = new ctune_spm;
    auto status = h->processor.Load(path);
    if (!status.ok()) {
      std::string msg = std::string(path) + ": cannot load SentencePiece model (" + status.ToString() + ")";
      if (err && err_cap > 0) {
        std::strncpy(err, msg.c_str(), err_cap - 1);
        err[err_cap - 1] = '\0';
      }
      delete h;
      return nullptr;
    }
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.live.insert(h);
    return h;
  } catch (const std::exception& e) {
    if (err && err_cap > 0) {
      std::strncpy(err, e.what(), err_cap - 1);
      err[err_cap - 1] = '\0';
    }
    return nullptr;
  }
}

void ctune_spm_free(ctune_spm* h) {
  if (!h || g_shut_down) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.live.erase(h)) delete h;
}

const char* ctune_spm_last_error(const ctune_spm*) {
  return g_last_error.c_str();
}

long ctune_spm_encode(ctune_spm* h, const char* text, size_t len, int32_t* ids, size_t cap) {
  try {
    std::vector<int> pieces;
    auto status = h->processor.Encode(std::string(text, len), &pieces);
    if (!status.ok()) return fail("encode: " + status.ToString());
    std::vector<int32_t> out(pieces.begin(), pieces.end());
    return copy_out(out.data(), out.size(), ids, cap);
  } catch (const std::exception& e) {
    return fail(std::string("encode: ") + e.what());
  }
}

long ctune_spm_decode(ctune_spm* h, const int32_t* ids, size_t n, char* out, size_t cap) {
  try {
    std::vector<int> in(ids, ids + n);
    for (int id : in) {
      if (!valid_id(h, id)) return fail("decode: id " + std::to_string(id) + " is outside the vocabulary");
    }
    std::string text;
    auto status = h->processor.Decode(in, &text);
    if (!status.ok()) return fail("decode: " + status.ToString());
    return copy_out(text.data(), text.size(), out, cap);
  } catch (const std::exception& e) {
    return fail(std::string("decode: ") + e.what());
  }
}

long ctune_spm_id_to_piece(ctune_spm* h, int32_t id, char* out, size_t cap) {
  try {
    if (!valid_id(h, id)) return fail("id " + std::to_string(id) + " is outside the vocabulary");
    const std::string& piece = h->processor.IdToPiece(id);
    return copy_out(piece.data(), piece.size(), out, cap);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

int32_t ctune_spm_piece_to_id(const ctune_spm* h, const char* piece, size_t len) {
  try {
    std::string p(piece, len);
    int id = h->processor.PieceToId(p);
    if (!valid_id(h, id) || h->processor.IdToPiece(id) != p) return -1;
    return id;
  } catch (const std::exception&) {
    return -1;
  }
}

int32_t ctune_spm_vocab_size(const ctune_spm* h) {
  return h->processor.GetPieceSize();
}

int ctune_spm_piece_type(const ctune_spm* h, int32_t id) {
  if (!valid_id(h, id)) return 0;
  const auto& p = h->processor;
  if (p.IsUnknown(id)) return CTUNE_SPM_UNKNOWN;
  if (p.IsControl(id)) return CTUNE_SPM_CONTROL;
  if (p.IsUnused(id)) return CTUNE_SPM_UNUSED;
  if (p.IsByte(id)) return CTUNE_SPM_BYTE;
  return CTUNE_SPM_NORMAL;
}

int32_t ctune_spm_bos_id(const ctune_spm* h) {
  return h->processor.bos_id();
}
int32_t ctune_spm_eos_id(const ctune_spm* h) {
  return h->processor.eos_id();
}
int32_t ctune_spm_pad_id(const ctune_spm* h) {
  return h->processor.pad_id();
}
int32_t ctune_spm_unk_id(const ctune_spm* h) {
  return h->processor.unk_id();
}

}  // extern "C"
