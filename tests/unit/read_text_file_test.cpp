// The one reader of files the user names: the whole text, or an InputError that names the file
// and why; with a cap, a file past it is refused without being read whole.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/text.hpp"
#include "trainfit/error.hpp"

namespace trainfit::detail {
namespace {

std::string error_of(const std::string& path, std::optional<std::size_t> cap = std::nullopt) {
  try {
    (void)read_text_file(path, "test file", cap);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ReadTextFile, WholeTextUpToAndAtTheCap) {
  const std::string big(200000, 'x');  // longer than one read chunk
  EXPECT_EQ(read_text_file(write("big.txt", big), "test file"), big);
  EXPECT_EQ(read_text_file(write("exact.txt", "12345"), "test file", 5), "12345");
  EXPECT_EQ(read_text_file(write("empty.txt", ""), "test file", 5), "");
}

TEST(ReadTextFile, PastTheCapIsRefused) {
  const std::string path = write("over.txt", std::string(1025, 'x'));
  EXPECT_EQ(error_of(path, 1024), "test file '" + path + "' is larger than 1.0 KiB");
  EXPECT_EQ(error_of(path), "(accepted)");
}

TEST(ReadTextFile, MissingFileAndDirectoryAreNamed) {
  EXPECT_EQ(error_of("/nonexistent/dir/x.toml"), "cannot read test file '/nonexistent/dir/x.toml': no such file");
  const std::string dir = ::testing::TempDir();
  EXPECT_EQ(error_of(dir), "cannot read test file '" + dir + "': it is a directory");
}

TEST(ReadFileTail, TheLastBytesOnlyAndNothingWhenUnreadable) {
  std::string text;
  for (int i = 0; i < 100000; ++i) text += std::to_string(i % 10);
  const std::string path = write("log.txt", text);
  EXPECT_EQ(read_file_tail(path, 1000), text.substr(text.size() - 1000));
  EXPECT_EQ(read_file_tail(path, 1 << 20), text);  // smaller than the cap: whole
  EXPECT_EQ(read_file_tail("/nonexistent/log.txt", 100), "");
  // /proc files say they are empty; they are read from the start.
  EXPECT_NE(read_file_tail("/proc/self/stat", 4096).find(')'), std::string::npos);
}

}  // namespace
}  // namespace trainfit::detail
