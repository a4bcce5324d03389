// libFuzzer target for a .json.gz trace as `trainfit trace FILE` reads it: the input is written to a
// file and read through the gzip decoder (ISA-L's, or zlib's where the build has no libisal; the
// seeds start with gzip's magic bytes, which is what makes the reader inflate). Any input is
// analysed (a partial answer for a stream cut short or corrupt) or refused with an InputError:
// never a crash. A cut stream is also inflated by zlib from the start (json_stream.cpp), and the
// bytes after the last member are checked for another: both are reached from here.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "trainfit/error.hpp"
#include "trainfit/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/trainfit_fuzz_trace_gzip_" + std::to_string(::getpid()) + ".json.gz";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  const bool written = std::fwrite(data, 1, size, f) == size;
  std::fclose(f);
  if (!written) return 0;
  try {
    const trainfit::trace::TraceReport report = trainfit::trace::analyse_trace(path);
    for (const auto& r : report.ranks)
      for (const auto& s : r.steps)
        if (s.gpu_busy_s < 0 || s.gpu_busy_s > s.wall_s + 1e-9) __builtin_trap();
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
