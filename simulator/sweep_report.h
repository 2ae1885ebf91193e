#pragma once

#include <string>

#include "planner/sweep.h"

namespace shardplan {

// A self-contained HTML page of a sweep: the ranked table of the fastest fitting
// configurations and an SVG of every evaluated point, peak reserved memory against step
// time, the Pareto front highlighted and the memory cap drawn.
std::string sweep_report_html(const SweepResult& result, const std::string& title, int top);

}  // namespace shardplan
