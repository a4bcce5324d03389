#include <gtest/gtest.h>

#include "trainfit/error.hpp"
#include "trainfit/setup.hpp"

namespace trainfit {
namespace {

TEST(Setup, ParsesNamesAndRejectsUnknownOnesWithTheValidList) {
  EXPECT_EQ(parse_method("QLoRA"), Method::qlora);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::bf16);
  EXPECT_EQ(parse_optimizer("adamw-8bit"), Optimizer::adamw_8bit);
  EXPECT_EQ(parse_attention("eager"), Attention::eager);
  try {
    parse_method("dora");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("full, lora, qlora"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_dtype("int4"), InputError);
}

TEST(Setup, LoraTargetsAcceptShorthandsAndRejectJunk) {
  EXPECT_EQ(parse_lora_targets("all-linear"), std::vector<std::string>{"all-linear"});
  EXPECT_EQ(parse_lora_targets("q, v,q_proj"), (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_THROW(parse_lora_targets("q,,v"), InputError);
  EXPECT_THROW(parse_lora_targets("q;rm -rf"), InputError);
}

TEST(Setup, ValidateRejectsImpossibleSetups) {
  TrainingSetup s;
  EXPECT_NO_THROW(validate(s));
  auto bad = [](auto change) {
    TrainingSetup t;
    change(t);
    EXPECT_THROW(validate(t), InputError);
  };
  bad([](TrainingSetup& t) { t.seq = 0; });
  bad([](TrainingSetup& t) { t.seq = -5; });
  bad([](TrainingSetup& t) { t.batch = 1 << 20; });
  bad([](TrainingSetup& t) { t.seq = 1 << 20; t.batch = 1 << 10; });  // tokens overflow guard
  bad([](TrainingSetup& t) { t.grad_accum = 0; });
  bad([](TrainingSetup& t) { t.headroom = 1.0; });
  bad([](TrainingSetup& t) { t.lora.rank = 0; });
  bad([](TrainingSetup& t) { t.lora.dropout = 1.0; });
  bad([](TrainingSetup& t) { t.method = Method::qlora; t.weights = DType::bf16; });
  bad([](TrainingSetup& t) { t.method = Method::lora; t.weights = DType::nf4; });
  bad([](TrainingSetup& t) { t.method = Method::full; t.weights = DType::bf16; t.amp = DType::bf16; });
  bad([](TrainingSetup& t) { t.amp = DType::fp32; });
}

TEST(Setup, BytesPerElement) {
  EXPECT_EQ(bytes_per_element(DType::nf4), 0.5);
  EXPECT_EQ(bytes_per_element(DType::bf16), 2.0);
  EXPECT_EQ(bytes_per_element(DType::fp32), 4.0);
}

TEST(SetupDataParallel, NamesAndLimits) {
  EXPECT_EQ(parse_parallel("FSDP"), Parallel::fsdp);
  EXPECT_EQ(parse_parallel("ddp"), Parallel::ddp);
  EXPECT_THROW(parse_parallel("zero3"), InputError);
  TrainingSetup s;
  s.gpus = 0;
  EXPECT_THROW(validate(s), InputError);
  s.gpus = 2;
  s.parallel = Parallel::fsdp;
  s.method = Method::qlora;
  s.weights = DType::nf4;
  EXPECT_THROW(validate(s), InputError);  // not modelled: says so instead of guessing
  s.parallel = Parallel::ddp;
  EXPECT_NO_THROW(validate(s));
}

}  // namespace
}  // namespace trainfit
