#include "common/stop_signals.h"

namespace kp {

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void RecordStopSignal(int signal) { g_stop_signal = signal; }

}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = RecordStopSignal;
  sigemptyset(&sa.sa_mask);
  for (std::size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &sa, &previous_[i]);
}

StopSignals::~StopSignals() {
  for (std::size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
  g_stop_signal = 0;
}

const volatile std::sig_atomic_t* StopSignals::flag() const { return &g_stop_signal; }

void StopSignals::Clear() { g_stop_signal = 0; }

}  // namespace kp
