// Training data for the runtime: a built-in synthetic corpus and nanoGPT-style
// binary token files. A batch is a pure function of (seed, step), so a resumed
// run reads exactly the batches the uninterrupted run would have read.
// No LibTorch here: the trainer turns the tokens into tensors.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_DATA_H_
#define KIMI_PLAN_RUNTIME_TRAIN_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "common/splitmix.h"
#include "common/status.h"

namespace kp::runtime {

/// A deterministic source of token sequences.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  /// `batch` rows of `length` tokens (row-major) for optimizer step `step`;
  /// the same arguments always give the same tokens.
  virtual std::vector<std::int64_t> Batch(std::int64_t step, int batch, int length) const = 0;
  /// One line for logs, e.g. "synthetic Markov chain over 2048 tokens".
  virtual std::string Describe() const = 0;
};

/// A fixed random first-order Markov chain: every token has 4 successors
/// (drawn once from the seed) taken with probabilities 0.7, 0.15, 0.1, 0.05.
/// Rows start at a uniformly drawn token. A model that learns the table
/// reaches EntropyRate() nats per token; a uniform guess costs ln(vocab).
class SyntheticCorpus : public TokenSource {
 public:
  static constexpr int kSuccessors = 4;
  SyntheticCorpus(int vocab, std::uint64_t seed);
  std::vector<std::int64_t> Batch(std::int64_t step, int batch, int length) const override;
  std::string Describe() const override;
  /// -sum p ln p over the successor probabilities.
  static double EntropyRate();
  /// The i-th successor of `token` (i < kSuccessors).
  std::int64_t Successor(std::int64_t token, int i) const { return successors_[token * kSuccessors + i]; }

 private:
  int vocab_;
  std::uint64_t seed_;
  std::vector<std::int64_t> successors_;
};

/// A file of little-endian token ids, uint16 (nanoGPT's train.bin) or uint32;
/// rows are windows at offsets drawn from (seed, step, row).
class TokenFile : public TokenSource {
 public:
  /// Reads and checks the whole file: NotFound when it is missing;
  /// InvalidArgument when its size is not a multiple of `token_bytes`
  /// (truncated), when it holds fewer than `min_tokens`, or when a token id is
  /// >= `vocab` (naming the first offending offset).
  static Result<std::unique_ptr<TokenFile>> Open(const FileSystem& fs, const std::string& path, int token_bytes,
                                                 int vocab, int min_tokens, std::uint64_t seed);
  std::vector<std::int64_t> Batch(std::int64_t step, int batch, int length) const override;
  std::string Describe() const override;
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }

 private:
  TokenFile(std::string path, std::vector<std::int64_t> tokens, std::uint64_t seed)
      : path_(std::move(path)), tokens_(std::move(tokens)), seed_(seed) {}
  std::string path_;
  std::vector<std::int64_t> tokens_;
  std::uint64_t seed_;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_DATA_H_
