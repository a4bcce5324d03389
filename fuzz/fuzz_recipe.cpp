// libFuzzer target for training recipes (`--recipe FILE`, YAML or JSON): any input either yields
// settings that each pass their row's check and resolve to a setup or refuse with a SettingError,
// or an InputError; never a crash, never a hang in the YAML reader.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainfit/error.hpp"
#include "trainfit/recipe.hpp"
#include "trainfit/settings.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const trainfit::Recipe r = trainfit::parse_recipe(text, "fuzz.yaml");
    for (const trainfit::GivenSetting& g : r.settings) {
      if (g.setting == nullptr) __builtin_trap();
      trainfit::check_setting_in_bounds(*g.setting, g.value);  // a value its row refuses: a bug
    }
    try {
      (void)trainfit::resolve_setup(r.settings);
    } catch (const trainfit::SettingError&) {
    }
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
