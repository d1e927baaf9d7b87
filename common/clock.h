// Wall-clock time behind an interface, so records and progress can be
// tested with a fixed time.
#ifndef KIMI_PLAN_COMMON_CLOCK_H_
#define KIMI_PLAN_COMMON_CLOCK_H_

#include <chrono>
#include <string>

namespace kp {

class Clock {
 public:
  virtual ~Clock() = default;
  /// Seconds since the Unix epoch.
  virtual double Now() const = 0;
  /// ISO 8601 UTC, e.g. "2026-11-30T10:28:18Z".
  std::string NowIso8601() const;
};

class SystemClock : public Clock {
 public:
  double Now() const override {
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
  }
};

class FakeClock : public Clock {
 public:
  explicit FakeClock(double t = 0) : t_(t) {}
  double Now() const override { return t_; }
  void Advance(double s) { t_ += s; }

 private:
  double t_;
};

/// A monotonic stopwatch for measuring how long work took (not a side
/// effect a test needs to control: only reported, never compared).
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_CLOCK_H_
