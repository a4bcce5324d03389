// load_model: built-in names, Hugging Face ids, config.json files and folders.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "trainfit/error.hpp"
#include "trainfit/model.hpp"

namespace trainfit {
namespace {

namespace fs = std::filesystem;

const char* const kTinyQwen3 = R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
  "torch_dtype": "bfloat16", "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 32, "num_hidden_layers": 3, "vocab_size": 1000,
  "tie_word_embeddings": true})";

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / (std::string("trainfit_model_") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& relative, const std::string& text) {
    const fs::path p = dir_ / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

  fs::path dir_;
};

std::string load_error(const std::string& name) {
  try {
    load_model(name);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError for " << name;
  return {};
}

TEST_F(TempDir, LoadsAConfigFile) {
  const fs::path file = write("config.json", kTinyQwen3);
  const ModelSpec m = load_model(file.string());
  EXPECT_EQ(m.name, file.string());
  EXPECT_EQ(m.model_type, "qwen3");
  EXPECT_EQ(m.num_layers, 3);
  EXPECT_TRUE(m.tie_word_embeddings);
  // 3 layers of q/k/v/o + MLP + 2 norms + q/k norms, one tied embedding, a final norm.
  const std::int64_t layer = 128 * 128 + 2 * 128 * 64 + 128 * 128 + 3 * 128 * 256 + 2 * 128 + 2 * 32;
  EXPECT_EQ(count_parameters(m).total, 3 * layer + 1000 * 128 + 128);
}

TEST_F(TempDir, LoadsAFolderHoldingConfigJson) {
  write("my-model/config.json", kTinyQwen3);
  const ModelSpec m = load_model((dir_ / "my-model").string());
  EXPECT_EQ(m.hidden_size, 128);
  EXPECT_EQ(m.name, (dir_ / "my-model" / "config.json").string());
}

TEST_F(TempDir, FolderWithoutConfigJson) {
  fs::create_directories(dir_ / "empty");
  const std::string e = load_error((dir_ / "empty").string());
  EXPECT_NE(e.find("holds no config.json"), std::string::npos) << e;
}

TEST_F(TempDir, MalformedFileNamesThePath) {
  const fs::path file = write("bad.json", R"({"model_type": "llama", "hidden_size": )");
  const std::string e = load_error(file.string());
  EXPECT_EQ(e.rfind(file.string() + ": not valid JSON", 0), 0u) << e;
}

// Past 16 MiB a "config.json" is not one: refused before it is read whole.
TEST_F(TempDir, OversizedConfigIsRefused) {
  const fs::path file = write("huge.json", "{" + std::string(std::size_t{16} << 20, ' ') + "}");
  EXPECT_EQ(load_error(file.string()), "model config '" + file.string() + "' is larger than 16.0 MiB");
}

TEST_F(TempDir, ExistingPathWinsOverBuiltinName) {
  write("qwen2.5-7b/config.json", kTinyQwen3);
  const fs::path old = fs::current_path();
  fs::current_path(dir_);
  const ModelSpec m = load_model("qwen2.5-7b");
  fs::current_path(old);
  EXPECT_EQ(m.hidden_size, 128);
}

TEST(LoadModel, BuiltinNamesAreCaseInsensitive) {
  EXPECT_EQ(load_model("QWEN2.5-7B").hidden_size, 3584);
  EXPECT_EQ(load_model("Qwen2.5-7b").name, "qwen2.5-7b");
}

TEST(LoadModel, HuggingFaceIdsMapToBuiltins) {
  EXPECT_EQ(load_model("Qwen/Qwen2.5-7B").name, "qwen2.5-7b");
  EXPECT_EQ(load_model("Qwen/Qwen2.5-7B-Instruct").name, "qwen2.5-7b");
  EXPECT_EQ(load_model("meta-llama/Meta-Llama-3.1-8B-Instruct").name, "llama3.1-8b");
  EXPECT_EQ(load_model("google/gemma-2-9b-it").name, "gemma2-9b");
  EXPECT_EQ(load_model("mistralai/Mixtral-8x7B-v0.1").name, "mixtral-8x7b");
  EXPECT_EQ(load_model("Qwen3-30B-A3B").name, "qwen3-30b-a3b");
  const ModelSpec llama33 = load_model("meta-llama/Llama-3.3-70B-Instruct");
  EXPECT_EQ(llama33.name, "llama3.3-70b");
  EXPECT_EQ(llama33.hidden_size, 8192);
}

TEST(LoadModel, UnknownNameListsCloseBuiltins) {
  const std::string e = load_error("qwen2.5-8b");
  EXPECT_NE(e.find("unknown model 'qwen2.5-8b'"), std::string::npos) << e;
  EXPECT_NE(e.find("qwen2.5-7b"), std::string::npos) << e;
  EXPECT_EQ(e.find("gemma2-9b"), std::string::npos) << e;
  const std::string far = load_error("zzzz");
  EXPECT_NE(far.find("built-in names: qwen2.5-0.5b"), std::string::npos) << far;
  EXPECT_NE(load_error("").find("empty"), std::string::npos);
}

}  // namespace
}  // namespace trainfit
