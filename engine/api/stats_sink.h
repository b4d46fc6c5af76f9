// The stats interface of the public API. StatsSink itself is defined in
// engine/core (the offload runtime, the lowest layer that reports, calls it);
// this header is where the server finds it.
#ifndef VISMOE_ENGINE_API_STATS_SINK_H_
#define VISMOE_ENGINE_API_STATS_SINK_H_

#include "engine/core/stats_sink.h"  // IWYU pragma: export

#endif  // VISMOE_ENGINE_API_STATS_SINK_H_
