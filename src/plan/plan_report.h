// The plan as text a person can act on: the setup, a table per tier, the
// verdict with the binding constraint and what to change, the placement, the
// stage and step times, and the largest model that fits.
#pragma once

#include <string>
#include <vector>

#include "plan/planner.h"

namespace tierflow {

// "6.74 B", "124.4 M", "858.9 K".
std::string FormatParamCount(int64_t params);
// "12.3 s", "450 ms", "2.1 h".
std::string FormatSeconds(double seconds);

// `hardware_notes`: lines describing where each hardware figure came from
// (detected, flag, default), printed under the hardware heading. `largest`
// and `longest` may be null.
std::string FormatPlanReport(const PlanInput& input, const Hardware& hardware, const Plan& plan,
                             const LargestModel* largest,
                             const std::vector<std::string>& hardware_notes,
                             const LongestContext* longest = nullptr);

}  // namespace tierflow
