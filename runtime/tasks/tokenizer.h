// The SDPO loop's built-in tokenizer: one token per byte plus four special
// tokens. It needs no vocabulary file, round-trips any byte string exactly, and
// its 260 ids fit every preset's vocabulary (kimi-k3-debug has 2048): a model
// with a larger vocabulary simply never sees ids >= kVocabSize in its data.
// No LibTorch here.
//
// Ids (fixed; a checkpoint trained with them depends on them):
//   0 .. 255  the byte of that value
//   256       PAD  padding, never a model target
//   257       BOS  begins every prompt
//   258       EOS  ends a response; the rollout stops on it
//   259       SEP  separates the prompt from the response
// Thread-safety: stateless; any number of threads may share one.
#ifndef KIMI_PLAN_RUNTIME_TASKS_TOKENIZER_H_
#define KIMI_PLAN_RUNTIME_TASKS_TOKENIZER_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace kp::runtime {

class ByteTokenizer {
 public:
  static constexpr std::int64_t kPad = 256;
  static constexpr std::int64_t kBos = 257;
  static constexpr std::int64_t kEos = 258;
  static constexpr std::int64_t kSep = 259;
  /// Ids are [0, kVocabSize); a model needs at least this many embeddings.
  static constexpr std::int64_t kVocabSize = 260;

  /// The bytes of `text` as ids, one per byte (no special tokens added).
  std::vector<std::int64_t> Encode(std::string_view text) const;

  /// BOS, the bytes of `prompt`, SEP: what a policy is conditioned on before it
  /// writes a response.
  std::vector<std::int64_t> EncodePrompt(std::string_view prompt) const;

  /// The bytes of `ids`; special tokens are written as their names ("<pad>",
  /// "<bos>", "<eos>", "<sep>"), so Decode(Encode(s)) == s for every s.
  /// InvalidArgument naming the position of the first id outside
  /// [0, kVocabSize).
  Result<std::string> Decode(std::span<const std::int64_t> ids) const;

  /// The text of a sampled response: the bytes before the first EOS, with
  /// PAD, BOS and SEP dropped. A sampled id outside [0, kVocabSize) (a model
  /// with a larger vocabulary) is a wrong answer, not an error: it becomes
  /// U+FFFD, so the verifier rejects it and the correction shows it.
  std::string DecodeResponse(std::span<const std::int64_t> ids) const;

  /// "<pad>", "<bos>", "<eos>", "<sep>" for the special ids, "" otherwise.
  static std::string_view SpecialName(std::int64_t id);
  static bool IsSpecial(std::int64_t id) { return id >= kPad && id < kVocabSize; }
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TASKS_TOKENIZER_H_
