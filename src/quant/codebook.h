// A sorted table of quantisation levels with nearest-level coding, shared by NF4 (16 levels)
// and the 8-bit dynamic map (256 levels). "Nearest" is exact: a value is compared with the
// midpoints of adjacent levels computed in double (exact for fp32 levels); a value exactly on a
// midpoint takes the lower index (the first minimum, as argmin over |s - level| gives).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ctune::quant::detail {

class Codebook {
 public:
  explicit Codebook(std::vector<float> levels) : levels_(std::move(levels)) {
    for (std::size_t i = 0; i + 1 < levels_.size(); ++i) mids_.push_back((double(levels_[i]) + levels_[i + 1]) / 2.0);
  }
  // Index of the level nearest to s (number of midpoints strictly below s).
  std::uint8_t encode(float s) const {
    return static_cast<std::uint8_t>(std::lower_bound(mids_.begin(), mids_.end(), double(s)) - mids_.begin());
  }
  float level(std::uint8_t code) const { return levels_[code]; }
  const std::vector<float>& levels() const { return levels_; }

 private:
  std::vector<float> levels_;  // ascending
  std::vector<double> mids_;
};

}  // namespace ctune::quant::detail
