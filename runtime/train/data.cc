#include "runtime/train/data.h"

#include <cmath>

#include "common/limits.h"

namespace kp::runtime {

namespace {

constexpr double kSuccessorProbability[SyntheticCorpus::kSuccessors] = {0.7, 0.15, 0.1, 0.05};

// One independent stream per (seed, step, row): a row never depends on how
// many rows or steps came before it.
std::uint64_t RowStream(std::uint64_t seed, std::int64_t step, int row) {
  return Mix64(Mix64(Mix64(seed) ^ static_cast<std::uint64_t>(step)) ^ static_cast<std::uint64_t>(row));
}

// A uniform double in [0, 1) from the top 53 bits.
double Unit(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

}  // namespace

SyntheticCorpus::SyntheticCorpus(int vocab, std::uint64_t seed) : vocab_(vocab), seed_(seed) {
  successors_.resize(static_cast<std::size_t>(vocab) * kSuccessors);
  std::uint64_t s = Mix64(seed ^ 0x5eed5eedULL);
  for (auto& t : successors_) {
    s = Mix64(s);
    t = static_cast<std::int64_t>(s % static_cast<std::uint64_t>(vocab));
  }
}

std::vector<std::int64_t> SyntheticCorpus::Batch(std::int64_t step, int batch, int length) const {
  std::vector<std::int64_t> out(static_cast<std::size_t>(batch) * length);
  for (int r = 0; r < batch; ++r) {
    std::uint64_t s = RowStream(seed_, step, r);
    std::int64_t token = static_cast<std::int64_t>(s % static_cast<std::uint64_t>(vocab_));
    for (int t = 0; t < length; ++t) {
      out[static_cast<std::size_t>(r) * length + t] = token;
      s = Mix64(s);
      double u = Unit(s);
      int i = 0;
      while (i < kSuccessors - 1 && u >= kSuccessorProbability[i]) u -= kSuccessorProbability[i++];
      token = Successor(token, i);
    }
  }
  return out;
}

std::string SyntheticCorpus::Describe() const {
  return "synthetic Markov chain over " + std::to_string(vocab_) + " tokens (entropy rate " +
         std::to_string(EntropyRate()).substr(0, 5) + " nats)";
}

double SyntheticCorpus::EntropyRate() {
  double h = 0;
  for (double p : kSuccessorProbability) h -= p * std::log(p);
  return h;
}

Result<std::unique_ptr<TokenFile>> TokenFile::Open(const FileSystem& fs, const std::string& path, int token_bytes,
                                                   int vocab, int min_tokens, std::uint64_t seed) {
  if (token_bytes != 2 && token_bytes != 4)
    return Status::InvalidArgument("--token-dtype: must be uint16 or uint32");
  Result<std::string> bytes = fs.ReadFile(path, limits::kMaxTokenFileBytes);
  if (!bytes.ok()) return bytes.status().WithContext("--data");
  const std::string& b = *bytes;
  if (b.size() % token_bytes != 0)
    return Status::InvalidArgument("--data: " + path + " is truncated: " + std::to_string(b.size()) +
                                   " bytes is not a whole number of " + std::to_string(token_bytes) +
                                   "-byte tokens");
  const std::size_t n = b.size() / token_bytes;
  if (n < static_cast<std::size_t>(min_tokens))
    return Status::InvalidArgument("--data: " + path + " holds " + std::to_string(n) + " tokens, fewer than one " +
                                   std::to_string(min_tokens) + "-token training sequence");
  std::vector<std::int64_t> tokens(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t v = 0;
    for (int k = token_bytes - 1; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(b[i * token_bytes + k]);
    if (v >= static_cast<std::uint64_t>(vocab))
      return Status::InvalidArgument("--data: token " + std::to_string(v) + " at position " + std::to_string(i) +
                                     " of " + path + " is outside the model's vocabulary of " +
                                     std::to_string(vocab));
    tokens[i] = static_cast<std::int64_t>(v);
  }
  return std::unique_ptr<TokenFile>(new TokenFile(path, std::move(tokens), seed));
}

std::vector<std::int64_t> TokenFile::Batch(std::int64_t step, int batch, int length) const {
  std::vector<std::int64_t> out(static_cast<std::size_t>(batch) * length);
  const std::uint64_t starts = tokens_.size() - static_cast<std::size_t>(length) + 1;
  for (int r = 0; r < batch; ++r) {
    const std::size_t offset = RowStream(seed_, step, r) % starts;
    std::copy(tokens_.begin() + offset, tokens_.begin() + offset + length,
              out.begin() + static_cast<std::ptrdiff_t>(r) * length);
  }
  return out;
}

std::string TokenFile::Describe() const {
  return "token file " + path_ + " (" + std::to_string(tokens_.size()) + " tokens)";
}

}  // namespace kp::runtime
