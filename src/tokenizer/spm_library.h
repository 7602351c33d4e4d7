// Run-time loading of libctune_spm.so: locating it, dlopen()ing it in isolation and resolving the
// C entry points of spm_shim.h. Loaded once per process and never unloaded (SentencePiece's
// static objects must outlive every tokenizer).
#pragma once

#include <filesystem>

#include "tokenizer/spm_shim.h"

namespace ctune::tok {

struct SpmLibrary {
  decltype(&ctune_spm_load) load;
  decltype(&ctune_spm_free) free;
  decltype(&ctune_spm_last_error) last_error;
  decltype(&ctune_spm_encode) encode;
  decltype(&ctune_spm_decode) decode;
  decltype(&ctune_spm_id_to_piece) id_to_piece;
  decltype(&ctune_spm_piece_to_id) piece_to_id;
  decltype(&ctune_spm_vocab_size) vocab_size;
  decltype(&ctune_spm_piece_type) piece_type;
  decltype(&ctune_spm_bos_id) bos_id;
  decltype(&ctune_spm_eos_id) eos_id;
  decltype(&ctune_spm_pad_id) pad_id;
  decltype(&ctune_spm_unk_id) unk_id;
};

// The process-wide library; IoError (with the places searched) when it cannot be loaded.
const SpmLibrary& spm_library();


// Path of the libctune_spm.so to load, or an IoError listing where it looked: next to the
// running executable, the build tree, then $CTUNE_SPM_LIB.
std::filesystem::path find_spm_library();

}  // namespace ctune::tok
