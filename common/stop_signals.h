// Stopping long work cleanly: while a StopSignals lives, SIGINT, SIGTERM and
// SIGHUP set a flag instead of ending the process, so a command can finish
// what it is writing and say how it stopped (a launcher stops its ranks;
// `ingest --follow` leaves the run it follows readable). The flag is the one
// piece of process-wide state, since a signal handler can reach nothing
// else; one StopSignals at a time, on the main thread.
#ifndef KIMI_PLAN_COMMON_STOP_SIGNALS_H_
#define KIMI_PLAN_COMMON_STOP_SIGNALS_H_

#include <signal.h>

#include <array>
#include <csignal>

namespace kp {

class StopSignals {
 public:
  /// Installs the handlers; the previous ones come back on destruction.
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  /// The signal received since construction or Clear, 0 when none.
  const volatile std::sig_atomic_t* flag() const;
  void Clear();

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, kSignals.size()> previous_{};
};

}  // namespace kp

#endif  // KIMI_PLAN_COMMON_STOP_SIGNALS_H_
