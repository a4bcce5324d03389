#pragma once
// Looking up one saved tensor of a step's description by the name the breakdown gives it.
#include <string>
#include <vector>

#include "step/step_shape.hpp"

namespace trainfit::testing {

// The bytes per token of the saved tensor named `name`, or -1 when the step keeps none.
inline double kept(const std::vector<detail::Sized>& list, const std::string& name) {
  for (const auto& s : list)
    if (s.name() == name) return s.bytes;
  return -1;
}

}  // namespace trainfit::testing
