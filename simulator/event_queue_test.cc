#include "simulator/event_queue.h"

#include <gtest/gtest.h>

#include <string>

namespace kp {
namespace {

TEST(EventQueueTest, RunsInTimeOrderWithAStableTieBreak) {
  EventQueue q;
  std::string order;
  q.At(Nanoseconds(20), [&] { order += "c"; });
  q.At(Nanoseconds(10), [&] { order += "a"; });
  q.At(Nanoseconds(20), [&] { order += "d"; });
  q.At(Nanoseconds(10), [&] { order += "b"; });
  EXPECT_EQ(q.Run(), 4u);
  EXPECT_EQ(order, "abcd");
  EXPECT_EQ(q.now().value(), 20);
}

TEST(EventQueueTest, EventsMayScheduleEvents) {
  EventQueue q;
  std::vector<std::int64_t> times;
  std::function<void()> tick = [&] {
    times.push_back(q.now().value());
    if (times.size() < 3) q.After(Nanoseconds(5), tick);
  };
  q.At(Nanoseconds(1), tick);
  q.Run();
  EXPECT_EQ(times, (std::vector<std::int64_t>{1, 6, 11}));
}

TEST(StreamTest, SerialisesWork) {
  EventQueue q;
  Stream s(q);
  std::vector<std::int64_t> done;
  EXPECT_EQ(s.Submit(Nanoseconds(10), [&] { done.push_back(q.now().value()); }).value(), 0);
  EXPECT_EQ(s.Submit(Nanoseconds(5), [&] { done.push_back(q.now().value()); }).value(), 10);
  q.Run();
  EXPECT_EQ(done, (std::vector<std::int64_t>{10, 15}));
  EXPECT_EQ(s.busy().value(), 15);
  // Work submitted after an idle gap starts at the submission time.
  q.At(Nanoseconds(100), [&] { s.Submit(Nanoseconds(1), [&] { done.push_back(q.now().value()); }); });
  q.Run();
  EXPECT_EQ(done.back(), 101);
}

}  // namespace
}  // namespace kp
