#include "core/random_hex.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace ctune {

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  for (std::size_t got = 0; got < bytes;) {
    const ssize_t n = ::getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno != EINTR) throw IoError(std::string("getrandom: ") + std::strerror(errno));
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  static const char* digits = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * bytes);
  for (unsigned char c : raw) hex += {digits[c >> 4], digits[c & 15]};
  return hex;
}

}  // namespace ctune
