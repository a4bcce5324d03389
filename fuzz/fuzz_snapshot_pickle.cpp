// libFuzzer target for memory snapshots as the pickle torch.cuda.memory._dump_snapshot writes:
// read by trainfit's bounded pickle reader (no Python, nothing in the file run) and analysed,
// the out-of-memory moment included, or an InputError; never a crash, and the figures of an
// out-of-memory moment hold together. Seeds are pickles; fuzz_snapshot covers the JSON rendering.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trace/pickle_reader.hpp"
#include "trainfit/error.hpp"
#include "trainfit/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    (void)trainfit::trace::detail::read_pickle(bytes, "fuzz");
  } catch (const trainfit::InputError&) {
  }
  try {
    const auto s = trainfit::trace::analyse_snapshot_text(bytes, "fuzz");
    if (s.oom && (s.oom->cached_free_bytes != s.oom->reserved_bytes - s.oom->allocated_bytes ||
                  s.oom->fragmentation != (s.oom->cached_free_bytes >= s.oom->requested_bytes)))
      __builtin_trap();
    (void)trainfit::trace::render_snapshot(s, nullptr, trainfit::Format::table);
    (void)trainfit::trace::render_snapshot(s, nullptr, trainfit::Format::json);
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
