#pragma once
// A line on a terminal while a command works longer than a second without printing (reading a large
// trace, measuring the host): what it is doing and for how long, on standard error, erased when the
// work is done and before the command prints. Nothing when standard error is not a terminal, so
// pipes, files and tests see only the command's own output.
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace trainfit::cli {

class Progress {
 public:
  explicit Progress(std::string doing);
  ~Progress();  // stops the line and erases it
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

 private:
  std::string doing_;
  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::jthread ticker_;  // last: it starts once the rest is built and is joined first
};

}  // namespace trainfit::cli
