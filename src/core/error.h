// Typed errors. Library code throws these with the offending values in the message; `main`
// catches them once and prints one line. Message shape: "<where>: <what> (expected X, found Y)".
#pragma once

#include <stdexcept>
#include <string>

namespace ctune {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  virtual const char* kind() const noexcept { return "error"; }
};

// A recipe, config.json or command-line value is invalid or inconsistent.
class ConfigError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "config error"; }
};

// A file exists but its bytes do not follow the format (safetensors, index, tokenizer.json...).
class FormatError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "format error"; }
};

// Tensor shapes or counts disagree with what the model or format requires.
class ShapeError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "shape error"; }
};

// The operating system refused (missing file, permission, disk full, mmap failure).
class IoError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "io error"; }
};

// A feature the input asks for exists in the ecosystem but ctune does not implement it.
class UnsupportedError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "unsupported"; }
};

// More memory than the process can hold: a model whose weights alone do not fit, a training run
// past its budget (train/run/out_of_memory.h adds the phase and the plan that fits).
class MemoryError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "out of memory"; }
};

// A chat template that does not parse, or fails while rendering (its own raise_exception, an
// undefined value used, a sandbox limit). The message names the template position.
class TemplateError : public Error {
 public:
  using Error::Error;
  const char* kind() const noexcept override { return "template error"; }
};

}  // namespace ctune
