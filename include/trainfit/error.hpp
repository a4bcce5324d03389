#pragma once
// Errors the library reports. The library never prints and never exits; the caller decides how
// to show each kind (the CLI prints one line and exits with the kind's code, see app/main.cpp).
//
// - InputError: something the user gave is wrong (a flag value, a config file, a plan, a GPU
//   spec, a measurement file). The message names the offending field. CLI exit code 2.
// - SettingError: an InputError about one setting of a training setup. The message names the
//   setting by its JSON key ("rank"), and other settings it mentions as `key`; a front end maps
//   them to its own spelling (the CLI: "--rank").
// - SystemError: the machine, not the input, failed: a file that cannot be written or synced, a
//   process that cannot be started, a missing NVIDIA driver. CLI exit code 3.
#include <stdexcept>
#include <string>
#include <utility>

namespace trainfit {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class SettingError : public InputError {
 public:
  SettingError(std::string setting, std::string reason)
      : InputError(setting + ": " + reason), setting_(std::move(setting)), reason_(std::move(reason)) {}
  const std::string& setting() const { return setting_; }  // the JSON key: "grad_accum"
  const std::string& reason() const { return reason_; }    // the message without the setting's name

 private:
  std::string setting_;
  std::string reason_;
};

class SystemError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace trainfit
