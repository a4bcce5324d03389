// `trainfit bench --devices`: the list of GPUs the orchestrator runs configs on, checked.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"

namespace trainfit::bench {
namespace {

std::string error_of(const std::string& text, const std::vector<int>* available) {
  try {
    parse_devices(text, available);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(BenchDevices, ListsAreTakenInTheirOrder) {
  EXPECT_EQ(parse_devices("0,1", nullptr), (std::vector<int>{0, 1}));
  EXPECT_EQ(parse_devices("3", nullptr), (std::vector<int>{3}));
  EXPECT_EQ(parse_devices(" 2, 0 ", nullptr), (std::vector<int>{2, 0}));
  const std::vector<int> nvml = {0, 1, 3};  // NVML's indices (one GPU could not be opened)
  EXPECT_EQ(parse_devices("3,0", &nvml), (std::vector<int>{3, 0}));
  EXPECT_EQ(parse_devices("all", &nvml), nvml);
}

TEST(BenchDevices, BadListsAreOneLineErrors) {
  for (const char* bad : {"x", "", "0,,1", "-1", "1.5", "0;1", "0,", "99999999"}) {
    const std::string e = error_of(bad, nullptr);
    EXPECT_NE(e.find("--devices"), std::string::npos) << bad << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_NE(error_of("x", nullptr).find("'x' is not a GPU index"), std::string::npos);
  EXPECT_NE(error_of("0,1,0", nullptr).find("GPU 0 is listed twice"), std::string::npos);
  EXPECT_NE(error_of("all", nullptr).find("NVML is not available"), std::string::npos);
  const std::vector<int> nvml = {0, 1};
  EXPECT_NE(error_of("0,2", &nvml).find("there is no GPU 2; NVML lists 0,1"), std::string::npos)
      << error_of("0,2", &nvml);
}

}  // namespace
}  // namespace trainfit::bench
