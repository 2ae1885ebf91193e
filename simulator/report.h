#pragma once

#include <string>

#include "planner/plan.h"
#include "traces/timeline.h"

namespace shardplan {

// A self-contained HTML page (inline CSS and SVG, no script, nothing fetched) showing a
// simulated or measured step of `plan`: the summary, memory over time stacked by buffer
// role, the pool as offset × time rectangles (one per transient buffer), and a Gantt
// chart of the streams.
std::string html_report(const Plan& plan, const Timeline& timeline);

}  // namespace shardplan
