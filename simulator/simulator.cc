// The simulator library's translation unit for code shared by its parts;
// the event core itself is header-only (event_queue.h).
#include "simulator/event_queue.h"
