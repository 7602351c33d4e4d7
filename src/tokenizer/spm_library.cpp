// dlopen() of libctune_spm.so. RTLD_LOCAL keeps its symbols (and the protobuf 3.14 runtime that
// libsentencepiece carries) out of the global namespace; RTLD_DEEPBIND makes the library bind
// to its own dependencies first, so sentencepiece never resolves protobuf symbols against the
// 3.21 copy LibTorch brought into the process. AddressSanitizer refuses RTLD_DEEPBIND (it
// would bypass its malloc interposition); sanitizer builds never link LibTorch into the
// tokenizer tests, so they drop the flag.
#include "tokenizer/spm_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define CTUNE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CTUNE_ASAN 1
#endif
#endif

namespace ctune::tok {
namespace {

constexpr const char* kLibraryName = "libctune_spm.so";

std::vector<std::filesystem::path> candidates() {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) out.push_back(exe.parent_path() / kLibraryName);
#ifdef CTUNE_SPM_BUILD_PATH
  out.emplace_back(CTUNE_SPM_BUILD_PATH);
#endif
  if (const char* env = std::getenv("CTUNE_SPM_LIB"); env && *env) out.emplace_back(env);
  return out;
}

template <typename F>
void resolve(void* handle, const char* name, F& fn, const std::string& path) {
  void* sym = dlsym(handle, name);
  if (!sym) throw IoError(path + ": missing symbol " + name + " (stale libctune_spm.so?)");
  fn = reinterpret_cast<F>(sym);
}

SpmLibrary open_library() {
  const auto path = find_spm_library();
  int flags = RTLD_NOW | RTLD_LOCAL;
#ifndef CTUNE_ASAN
  flags |= RTLD_DEEPBIND;
#endif
  void* handle = dlopen(path.c_str(), flags);
  if (!handle) throw IoError(path.string() + ": dlopen failed (" + dlerror() + ")");
  SpmLibrary lib{};
  const std::string p = path.string();
  resolve(handle, "ctune_spm_load", lib.load, p);
  resolve(handle, "ctune_spm_free", lib.free, p);
  resolve(handle, "ctune_spm_last_error", lib.last_error, p);
  resolve(handle, "ctune_spm_encode", lib.encode, p);
  resolve(handle, "ctune_spm_decode", lib.decode, p);
  resolve(handle, "ctune_spm_id_to_piece", lib.id_to_piece, p);
  resolve(handle, "ctune_spm_piece_to_id", lib.piece_to_id, p);
  resolve(handle, "ctune_spm_vocab_size", lib.vocab_size, p);
  resolve(handle, "ctune_spm_piece_type", lib.piece_type, p);
  resolve(handle, "ctune_spm_bos_id", lib.bos_id, p);
  resolve(handle, "ctune_spm_eos_id", lib.eos_id, p);
  resolve(handle, "ctune_spm_pad_id", lib.pad_id, p);
  resolve(handle, "ctune_spm_unk_id", lib.unk_id, p);
  return lib;
}

}  // namespace

std::filesystem::path find_spm_library() {
  std::string searched;
  for (const auto& c : candidates()) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(c, ec)) return c;
    searched += (searched.empty() ? "" : ", ") + c.string();
  }
  throw IoError(std::string(kLibraryName) + " not found (searched: " + searched +
                "; set CTUNE_SPM_LIB to its path)");
}

const SpmLibrary& spm_library() {
  static std::mutex mutex;
  // Never freed: tokenizers destroyed during exit (held in statics) still call through it.
  static const SpmLibrary* lib = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (!lib) lib = new SpmLibrary(open_library());
  return *lib;
}

}  // namespace ctune::tok
