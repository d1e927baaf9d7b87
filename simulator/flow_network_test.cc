#include "simulator/flow_network.h"

#include <gtest/gtest.h>

#include <string>

namespace kp {
namespace {

// Every expected time below is worked by hand from bytes / rate, in ns.
constexpr double kGBps = 1e9;

LinkCapacity Link(double bytes_per_s, std::int64_t latency_ns = 0) {
  return LinkCapacity{BytesPerSecond(bytes_per_s), Nanoseconds(latency_ns)};
}

TEST(FlowNetworkTest, OneFlowMovesAtLinkRatePlusPathLatency) {
  EventQueue q;
  FlowNetwork net(q, {Link(1 * kGBps, 300), Link(4 * kGBps, 700)});
  std::int64_t done = -1;
  const auto f = net.Start({0, 1}, Bytes(2e9), [&] { done = q.now().value(); });
  // The slower link sets the rate: 1 GB/s.
  EXPECT_EQ(net.rate(f).value(), 1e9);
  q.Run();
  // 2 GB at 1 GB/s = 2 s, then 300 + 700 ns of latency once for the path.
  EXPECT_EQ(done, 2'000'000'000 + 1'000);
  EXPECT_EQ(net.active(), 0);
  EXPECT_EQ(net.rate(f).value(), 0);
}

TEST(FlowNetworkTest, TwoFlowsOnOneLinkEachGetHalf) {
  EventQueue q;
  FlowNetwork net(q, {Link(1 * kGBps)});
  std::int64_t a = -1, b = -1;
  const auto fa = net.Start({0}, Bytes(1e9), [&] { a = q.now().value(); });
  const auto fb = net.Start({0}, Bytes(3e9), [&] { b = q.now().value(); });
  EXPECT_EQ(net.rate(fa).value(), 0.5e9);
  EXPECT_EQ(net.rate(fb).value(), 0.5e9);
  q.Run();
  // a: 1 GB at 0.5 GB/s = 2 s. b: 1 GB by then, the other 2 GB alone at 1 GB/s: 4 s.
  EXPECT_EQ(a, 2'000'000'000);
  EXPECT_EQ(b, 4'000'000'000);
}

TEST(FlowNetworkTest, EqualFlowsFinishTogetherInStartOrder) {
  EventQueue q;
  FlowNetwork net(q, {Link(1 * kGBps, 50)});
  std::string order;
  std::int64_t a = -1, b = -1;
  net.Start({0}, Bytes(1e9), [&] { order += "a"; a = q.now().value(); });
  net.Start({0}, Bytes(1e9), [&] { order += "b"; b = q.now().value(); });
  q.Run();
  EXPECT_EQ(order, "ab");
  EXPECT_EQ(a, 2'000'000'050);
  EXPECT_EQ(b, 2'000'000'050);
}

TEST(FlowNetworkTest, RatesAreRecomputedWhenAFlowStarts) {
  EventQueue q;
  FlowNetwork net(q, {Link(1 * kGBps)});
  std::int64_t a = -1, b = -1;
  net.Start({0}, Bytes(3e9), [&] { a = q.now().value(); });
  q.At(Nanoseconds(1'000'000'000), [&] { net.Start({0}, Bytes(1e9), [&] { b = q.now().value(); }); });
  q.Run();
  // a alone for 1 s (1 GB, 2 GB left); then both at 0.5 GB/s: b's 1 GB
  // takes 2 s (done at 3 s), a moves 1 GB meanwhile; a's last 1 GB alone: 4 s.
  EXPECT_EQ(b, 3'000'000'000);
  EXPECT_EQ(a, 4'000'000'000);
}

TEST(FlowNetworkTest, AFlowBottleneckedElsewhereLeavesItsShareToTheOthers) {
  EventQueue q;
  // Link 0 is shared; link 1 is a 0.25 GB/s bottleneck only y crosses.
  FlowNetwork net(q, {Link(1 * kGBps), Link(0.25 * kGBps)});
  std::int64_t x_done = -1, y_done = -1;
  const auto x = net.Start({0}, Bytes(1.5e9), [&] { x_done = q.now().value(); });
  const auto y = net.Start({0, 1}, Bytes(1e9), [&] { y_done = q.now().value(); });
  // Max-min: y is held to 0.25 by link 1, so x gets the 0.75 that remains
  // on link 0, not an equal half.
  EXPECT_EQ(net.rate(y).value(), 0.25e9);
  EXPECT_EQ(net.rate(x).value(), 0.75e9);
  q.Run();
  // x: 1.5 GB at 0.75 GB/s = 2 s. y: 0.5 GB by then, the other 0.5 GB still at 0.25: 4 s.
  EXPECT_EQ(x_done, 2'000'000'000);
  EXPECT_EQ(y_done, 4'000'000'000);
}

TEST(FlowNetworkTest, ProgressiveFillingAcrossThreeLinks) {
  EventQueue q;
  // a crosses 0 and 1, b crosses 1 and 2, c crosses 2 only.
  // Link 1 (1 GB/s, 2 flows) is the tightest: a = b = 0.5. Link 0's other
  // capacity is unused (a is its only flow); link 2 (2 GB/s) leaves c 1.5.
  FlowNetwork net(q, {Link(3 * kGBps), Link(1 * kGBps), Link(2 * kGBps)});
  const auto a = net.Start({0, 1}, Bytes(1e9), [] {});
  const auto b = net.Start({1, 2}, Bytes(1e9), [] {});
  const auto c = net.Start({2}, Bytes(3e9), [] {});
  EXPECT_EQ(net.rate(a).value(), 0.5e9);
  EXPECT_EQ(net.rate(b).value(), 0.5e9);
  EXPECT_EQ(net.rate(c).value(), 1.5e9);
  q.Run();
  // a and b finish at 2 s; c has moved 3 GB by then too.
  EXPECT_EQ(q.now().value(), 2'000'000'000);
}

TEST(FlowNetworkTest, FractionalInstantsRoundUpToTheNextNanosecond) {
  EventQueue q;
  FlowNetwork net(q, {Link(3 * kGBps)});
  std::int64_t done = -1;
  net.Start({0}, Bytes(10), [&] { done = q.now().value(); });
  q.Run();
  EXPECT_EQ(done, 4);  // 10 B at 3 B/ns = 3.33 ns
}

TEST(FlowNetworkTest, EmptyFlowsCostOnlyTheirLatency) {
  EventQueue q;
  FlowNetwork net(q, {Link(1 * kGBps, 250)});
  std::int64_t zero_bytes = -1, no_path = -1;
  q.At(Nanoseconds(10), [&] {
    net.Start({0}, Bytes(0), [&] { zero_bytes = q.now().value(); });
    net.Start({}, Bytes(1e9), [&] { no_path = q.now().value(); });
  });
  q.Run();
  EXPECT_EQ(zero_bytes, 260);
  EXPECT_EQ(no_path, 10);
}

TEST(FlowNetworkTest, IsAPureFunctionOfItsInputs) {
  auto run = [] {
    EventQueue q;
    FlowNetwork net(q, {Link(1 * kGBps, 10), Link(0.3 * kGBps, 20), Link(0.7 * kGBps, 5)});
    std::vector<std::int64_t> t;
    for (int i = 0; i < 6; ++i) {
      q.At(Nanoseconds(i * 1'000'000), [&, i] {
        std::vector<LinkId> path = i % 3 == 0 ? std::vector<LinkId>{0} : i % 3 == 1 ? std::vector<LinkId>{0, 1}
                                                                                    : std::vector<LinkId>{2, 0};
        net.Start(path, Bytes(1e6 * (i + 1)), [&] { t.push_back(q.now().value()); });
      });
    }
    q.Run();
    return t;
  };
  const auto first = run();
  EXPECT_EQ(first.size(), 6u);
  EXPECT_EQ(first, run());
}

}  // namespace
}  // namespace kp
