#include "runtime/kernels/kernel_inputs.h"

#include <gtest/gtest.h>

namespace kp::runtime {
namespace {

const std::vector<c10::ScalarType> kFp32 = {torch::kFloat};

TEST(KernelInputsTest, EveryInputIsCheckedAndTheFirstMisfitNamed) {
  const torch::Tensor q = torch::zeros({2, 5, 3, 8}), k = torch::zeros({2, 5, 3, 8}), beta = torch::zeros({2, 5, 3});
  const std::vector<std::int64_t> tokens = {2, 5, 3, 8};
  EXPECT_EQ(KernelInputError("K", {{"q", &q, {kAnySize, kAnySize, kAnySize, 8}, kFp32},
                                   {"k", &k, tokens, kFp32},
                                   {"beta", &beta, {2, 5, 3}, kFp32}}),
            "");
  const torch::Tensor short_k = torch::zeros({2, 4, 3, 8});
  EXPECT_EQ(KernelInputError("K", {{"q", &q, tokens, kFp32}, {"k", &short_k, tokens, kFp32}}),
            "K: k: sizes [2, 4, 3, 8], where [2, 5, 3, 8] is read");
  EXPECT_EQ(KernelInputError("K", {{"beta", &q, {2, 5, kAnySize}, kFp32}}),
            "K: beta: sizes [2, 5, 3, 8], where [2, 5, ?] is read");
  const torch::Tensor half = torch::zeros({2, 5, 3}, torch::kBFloat16);
  EXPECT_EQ(KernelInputError("K", {{"q", &q, {}, kFp32}, {"beta", &half, {2, 5, 3}, {torch::kFloat, torch::kDouble}}}),
            "K: beta: BFloat16, where Float or Double is read");
}

TEST(KernelInputsTest, UndefinedAndOtherDeviceInputsAreRefusedUnlessOptional) {
  const torch::Tensor q = torch::zeros({4}), none;
  EXPECT_EQ(KernelInputError("K", {{"q", &q, {4}, kFp32}, {"s0", &none, {4}, kFp32}}), "K: s0: undefined");
  EXPECT_EQ(KernelInputError("K", {{"q", &q, {4}, kFp32}, {"s0", &none, {4}, kFp32, /*optional=*/true}}), "");
  const torch::Tensor elsewhere = torch::empty({4}, torch::TensorOptions().device(torch::kMeta));
  EXPECT_EQ(KernelInputError("K", {{"q", &q, {4}, kFp32}, {"g", &elsewhere, {4}, kFp32}}),
            "K: g: on meta, where the kernel runs on cpu");
  try {
    CheckKernelInputs("KdaRecurrentKernel", {{"q", &q, {4}, kFp32}, {"g", &elsewhere, {4}, kFp32}});
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_EQ(std::string(e.what_without_backtrace()), "KdaRecurrentKernel: g: on meta, where the kernel runs on cpu");
  }
}

}  // namespace
}  // namespace kp::runtime
