/* Plain C interface of libctune_spm.so, the only code in ctune that touches libsentencepiece.
 * Debian's libsentencepiece embeds protobuf 3.14 and LibTorch links protobuf 3.21: the two cannot
 * share a process's global symbol namespace (see docs/build.md#sentencepiece-and-libtorch-in-one-process). ctune therefore
 * never links sentencepiece; it dlopen()s this library with RTLD_LOCAL | RTLD_DEEPBIND and talks
 * to it through these functions only. No C++ type or exception crosses the boundary.
 *
 * Buffer protocol: functions that produce a variable amount of data write at most `cap`
 * elements and return the total count needed (call again with a larger buffer when it exceeds
 * `cap`), or -1 on error with a message in the handle's last error. */
#ifndef CTUNE_TOKENIZER_SPM_SHIM_H
#define CTUNE_TOKENIZER_SPM_SHIM_H

#include <stddef.h>
#include <stdint.h>

/* The library is built with hidden visibility; only these entry points are exported. */
#if defined(CTUNE_SPM_BUILDING)
#define CTUNE_SPM_API __attribute__((visibility("default")))
#else
#define CTUNE_SPM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ctune_spm ctune_spm;

/* Piece types, as sentencepiece::ModelProto::SentencePiece::Type. */
enum {
  CTUNE_SPM_NORMAL = 1,
  CTUNE_SPM_UNKNOWN = 2,
  CTUNE_SPM_CONTROL = 3,
  CTUNE_SPM_USER_DEFINED = 4,
  CTUNE_SPM_UNUSED = 5,
  CTUNE_SPM_BYTE = 6
};

/* Loads a model file. On failure returns NULL and writes a message into err (NUL-terminated,
 * truncated to err_cap). */
CTUNE_SPM_API ctune_spm* ctune_spm_load(const char* path, char* err, size_t err_cap);
CTUNE_SPM_API void ctune_spm_free(ctune_spm* h);
/* The message of the last failed call on this handle (never NULL). */
CTUNE_SPM_API const char* ctune_spm_last_error(const ctune_spm* h);

CTUNE_SPM_API long ctune_spm_encode(ctune_spm* h, const char* text, size_t len, int32_t* ids, size_t cap);
CTUNE_SPM_API long ctune_spm_decode(ctune_spm* h, const int32_t* ids, size_t n, char* out, size_t cap);
CTUNE_SPM_API long ctune_spm_id_to_piece(ctune_spm* h, int32_t id, char* out, size_t cap);
/* -1 when the piece is not in the vocabulary. */
CTUNE_SPM_API int32_t ctune_spm_piece_to_id(const ctune_spm* h, const char* piece, size_t len);
CTUNE_SPM_API int32_t ctune_spm_vocab_size(const ctune_spm* h);
/* 0 for an id outside the vocabulary. */
CTUNE_SPM_API int ctune_spm_piece_type(const ctune_spm* h, int32_t id);
/* -1 when the model has no such token. */
CTUNE_SPM_API int32_t ctune_spm_bos_id(const ctune_spm* h);
CTUNE_SPM_API int32_t ctune_spm_eos_id(const ctune_spm* h);
CTUNE_SPM_API int32_t ctune_spm_pad_id(const ctune_spm* h);
CTUNE_SPM_API int32_t ctune_spm_unk_id(const ctune_spm* h);

#ifdef __cplusplus
}
#endif

#endif /* CTUNE_TOKENIZER_SPM_SHIM_H */
