// bench/stats: percentiles and the one-line report format shared by the bench programs.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace space::bench {

using Clock = std::chrono::steady_clock;

inline double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Stats {
  double p50 = 0, p99 = 0, mean = 0, max = 0;
  size_t n = 0;
};

inline Stats Summarize(std::vector<double> v) {
  Stats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.p50 = v[v.size() / 2];
  s.p99 = v[std::min(v.size() - 1, static_cast<size_t>(v.size() * 0.99))];
  s.max = v.back();
  for (double x : v) s.mean += x;
  s.mean /= v.size();
  return s;
}

// "what  p50 .. p99 .. | baseline p50 .. p99 .. | ratio p50 ..x"
inline void Print(const char* what, const Stats& s, const Stats& base) {
  std::printf("%-34s p50 %8.2f ms  p99 %8.2f ms   | baseline p50 %8.2f ms  p99 %8.2f ms | ratio p50 %.2fx\n",
              what, s.p50, s.p99, base.p50, base.p99, base.p50 > 0 ? s.p50 / base.p50 : 0);
}

}  // namespace space::bench
