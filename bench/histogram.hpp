// A log-bucketed latency histogram in microseconds: 8 buckets per power of
// two (a bucket is ~9 % wide), from 1/16 µs to ~16 s. Fixed size, so worker
// processes can send theirs as a JSON array and the coordinator can add them
// up; percentiles are exact to within one bucket.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace zklock::bench {

class LogHistogram {
 public:
  static constexpr int kPerOctave = 8;
  static constexpr int kLowOctave = -4;  // 2^-4 µs
  static constexpr int kOctaves = 28;    // up to 2^24 µs
  static constexpr int kBuckets = kPerOctave * kOctaves;

  void add(double us) {
    ++counts_[static_cast<std::size_t>(index(us))];
    ++n_;
  }
  void merge(const std::vector<std::uint64_t>& counts) {
    for (std::size_t i = 0; i < counts.size() && i < counts_.size(); ++i) {
      counts_[i] += counts[i];
      n_ += counts[i];
    }
  }
  std::vector<std::uint64_t> counts() const { return {counts_.begin(), counts_.end()}; }
  std::uint64_t size() const { return n_; }

  // Nearest rank, reported as the bucket's geometric middle; NaN when empty.
  double percentile(double p) const {
    if (n_ == 0) return std::nan("");
    const auto rank = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(p / 100.0 * double(n_))));
    std::uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += counts_[static_cast<std::size_t>(i)];
      if (seen >= rank) return std::exp2((double(i) + 0.5) / kPerOctave + kLowOctave);
    }
    return std::exp2(double(kOctaves + kLowOctave));
  }

 private:
  static int index(double us) {
    if (!(us > 0)) return 0;
    const int i = static_cast<int>(std::floor((std::log2(us) - kLowOctave) * kPerOctave));
    return std::clamp(i, 0, kBuckets - 1);
  }
  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t n_ = 0;
};

}  // namespace zklock::bench
