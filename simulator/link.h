// One direction of one physical link, as the flow network sees it: a
// capacity shared by the transfers crossing it and a fixed latency. The
// cluster graph names its links by LinkId; the flow network only needs the
// capacities, so it depends on this header and not on the graph.
//
// Thread-safety: plain values.
#ifndef KIMI_PLAN_SIMULATOR_LINK_H_
#define KIMI_PLAN_SIMULATOR_LINK_H_

#include "common/units.h"

namespace kp {

/// Index of a link direction; dense from 0 in the graph that made it.
using LinkId = int;

/// What a link direction can carry.
struct LinkCapacity {
  BytesPerSecond bandwidth;  ///< > 0; shared max-min fairly by the flows on it
  Nanoseconds latency;       ///< >= 0; paid once per transfer that crosses it
};

}  // namespace kp

#endif  // KIMI_PLAN_SIMULATOR_LINK_H_
