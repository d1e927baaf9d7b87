// Units in the types: a byte count cannot be added to a time, and a rate
// times a time is a byte count. Every quantity the planner and the simulator
// compute flows through these, so a mistaken unit is a compile error.
//
// Thread-safety: plain values, freely copyable.
#ifndef KIMI_PLAN_COMMON_UNITS_H_
#define KIMI_PLAN_COMMON_UNITS_H_

#include <cstdint>
#include <compare>

namespace kp {

/// A value of one physical dimension. `Tag` names the dimension, `Rep` the
/// representation. Only same-dimension arithmetic is allowed here; cross
/// dimension products live below as named functions.
template <typename Tag, typename Rep>
class Quantity {
 public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(Rep v) : v_(v) {}
  constexpr Rep value() const { return v_; }

  constexpr Quantity operator+(Quantity o) const { return Quantity(v_ + o.v_); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(v_ - o.v_); }
  constexpr Quantity& operator+=(Quantity o) { v_ += o.v_; return *this; }
  constexpr Quantity& operator-=(Quantity o) { v_ -= o.v_; return *this; }
  constexpr Quantity operator*(Rep k) const { return Quantity(v_ * k); }
  constexpr Quantity operator/(Rep k) const { return Quantity(v_ / k); }
  constexpr double operator/(Quantity o) const {
    return static_cast<double>(v_) / static_cast<double>(o.v_);
  }
  constexpr auto operator<=>(const Quantity&) const = default;

 private:
  Rep v_{};
};

struct BytesTag {};
struct SecondsTag {};
struct NanosecondsTag {};
struct BytesPerSecondTag {};
struct FlopsTag {};
struct FlopsPerSecondTag {};

/// Memory sizes and message sizes. double: the planner's sizes reach 1e13
/// and are products of fractional factors (imbalance, utilisation).
using Bytes = Quantity<BytesTag, double>;
/// Wall-clock durations in the planner's analytical model.
using Seconds = Quantity<SecondsTag, double>;
/// Simulated time: integer so event order is exact and reproducible.
using Nanoseconds = Quantity<NanosecondsTag, std::int64_t>;
using BytesPerSecond = Quantity<BytesPerSecondTag, double>;
using Flops = Quantity<FlopsTag, double>;
using FlopsPerSecond = Quantity<FlopsPerSecondTag, double>;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;

constexpr Bytes GiB(double n) { return Bytes(n * kGiB); }
constexpr Bytes GB(double n) { return Bytes(n * kGB); }
/// Network and link speeds are quoted in gigabits per second.
constexpr BytesPerSecond Gbps(double n) { return BytesPerSecond(n * 1e9 / 8.0); }
/// Memory and NVLink speeds are quoted in gigabytes per second.
constexpr BytesPerSecond GBps(double n) { return BytesPerSecond(n * 1e9); }
constexpr FlopsPerSecond TFLOPS(double n) { return FlopsPerSecond(n * 1e12); }

constexpr Seconds TransferTime(Bytes b, BytesPerSecond r) {
  return Seconds(b.value() / r.value());
}
constexpr Seconds ComputeTime(Flops f, FlopsPerSecond r) {
  return Seconds(f.value() / r.value());
}
/// Rounded to the nearest nanosecond, saturating: a time beyond the
/// clock's +-9.2e18 ns (or NaN, as the largest) becomes the bound rather
/// than an undefined conversion, and the simulations' work checks refuse it.
constexpr Nanoseconds ToNanoseconds(Seconds s) {
  const double ns = s.value() * 1e9 + 0.5;
  constexpr double kBound = 9.2e18;  // below INT64_MAX (9.22e18), exactly representable
  if (!(ns < kBound)) return Nanoseconds(static_cast<std::int64_t>(kBound));
  if (ns < -kBound) return Nanoseconds(-static_cast<std::int64_t>(kBound));
  return Nanoseconds(static_cast<std::int64_t>(ns));
}
constexpr Seconds ToSeconds(Nanoseconds ns) {
  return Seconds(static_cast<double>(ns.value()) * 1e-9);
}

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_UNITS_H_
