#pragma once
// Errors the library reports. The library never prints and never exits: every
// problem with outside input (a config file, a flag value, a GPU spec) becomes
// an InputError whose message names the offending field, and the caller decides
// how to show it (the CLI prints one line and exits with code 2).
#include <stdexcept>
#include <string>

namespace trainfit {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace trainfit
