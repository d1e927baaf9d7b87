// splitmix64: the one integer hash behind the runtime's seeded draws (weight
// initialisation, the synthetic corpus, data order), so that they are the
// same on every platform (std distributions are implementation-defined).
#ifndef KIMI_PLAN_COMMON_SPLITMIX_H_
#define KIMI_PLAN_COMMON_SPLITMIX_H_

#include <cstdint>

namespace kp {

/// splitmix64 of `x` (Steele, Lea and Flood 2014).
constexpr std::uint64_t Mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_SPLITMIX_H_
