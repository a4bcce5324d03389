#include "progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace trainfit::cli {
namespace {

bool on_a_terminal() {
  const char* term = std::getenv("TERM");
  return isatty(STDERR_FILENO) == 1 && !(term != nullptr && std::string_view(term) == "dumb");
}

}  // namespace

Progress::Progress(std::string doing) : doing_(std::move(doing)) {
  if (!on_a_terminal()) return;
  ticker_ = std::jthread([this](const std::stop_token& stop) {
    using namespace std::chrono_literals;
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock lock(mutex_);
    // Quiet for the first second: most commands answer well within it.
    if (wake_.wait_for(lock, stop, 1s, [] { return false; }) || stop.stop_requested()) return;
    bool shown = false;
    while (!stop.stop_requested()) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fputs(fmt::format("\rtrainfit: {} ({:.0f} s)\x1b[K", doing_, seconds).c_str(), stderr);
      std::fflush(stderr);
      shown = true;
      wake_.wait_for(lock, stop, 500ms, [] { return false; });
    }
    if (shown) {
      std::fputs("\r\x1b[K", stderr);  // the line erased: the command's own output follows
      std::fflush(stderr);
    }
  });
}

Progress::~Progress() {
  if (ticker_.joinable()) {
    ticker_.request_stop();
    ticker_.join();
  }
}

}  // namespace trainfit::cli
