#include "runtime/tasks/tokenizer.h"

namespace kp::runtime {

std::vector<std::int64_t> ByteTokenizer::Encode(std::string_view text) const {
  std::vector<std::int64_t> ids;
  ids.reserve(text.size());
  // Through unsigned char: bytes >= 0x80 are ids 128..255, never negative.
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

std::vector<std::int64_t> ByteTokenizer::EncodePrompt(std::string_view prompt) const {
  std::vector<std::int64_t> ids;
  ids.reserve(prompt.size() + 2);
  ids.push_back(kBos);
  for (char c : prompt) ids.push_back(static_cast<unsigned char>(c));
  ids.push_back(kSep);
  return ids;
}

std::string_view ByteTokenizer::SpecialName(std::int64_t id) {
  switch (id) {
    case kPad: return "<pad>";
    case kBos: return "<bos>";
    case kEos: return "<eos>";
    case kSep: return "<sep>";
    default: return "";
  }
}

Result<std::string> ByteTokenizer::Decode(std::span<const std::int64_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int64_t id = ids[i];
    if (id < 0 || id >= kVocabSize)
      return Status::InvalidArgument("token " + std::to_string(id) + " at position " + std::to_string(i) +
                                     " is outside the byte tokenizer's " + std::to_string(kVocabSize) + " ids");
    if (IsSpecial(id))
      text += SpecialName(id);
    else
      text.push_back(static_cast<char>(id));
  }
  return text;
}

std::string ByteTokenizer::DecodeResponse(std::span<const std::int64_t> ids) const {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8
  std::string text;
  for (std::int64_t id : ids) {
    if (id == kEos) break;
    if (id >= 0 && id < kPad)
      text.push_back(static_cast<char>(id));
    else if (!IsSpecial(id))
      text += kReplacement;
  }
  return text;
}

}  // namespace kp::runtime
