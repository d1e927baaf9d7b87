#include "weights/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kp {
namespace {

std::string U64(std::uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (8 * i));
  return out;
}

// A file built by hand from the format's description: length, header, buffer.
std::string Handmade(const std::string& header, const std::string& buffer) { return U64(header.size()) + header + buffer; }

std::string Floats(std::initializer_list<float> v) {
  std::string out(v.size() * 4, '\0');
  std::memcpy(out.data(), v.begin(), out.size());  // x86-64 is little-endian, as the format
  return out;
}

Result<SafetensorsFile> Parse(const std::string& bytes) { return SafetensorsFile::FromBytes(HeldBytes(bytes), "w.safetensors"); }

std::string ErrorOf(const std::string& bytes) {
  const Result<SafetensorsFile> f = Parse(bytes);
  return f.ok() ? "(accepted)" : f.status().message();
}

TEST(SafetensorsTest, WritesTheBytesTheFormatDescribes) {
  const std::string a = Floats({1, 2, 3, 4}), b = "\x01\x02\x03";
  Result<std::string> got = EncodeSafetensors({{"a", TensorDType::kF32, {2, 2}, a}, {"b", TensorDType::kI8, {3}, b}},
                                              {{"format", "pt"}});
  ASSERT_TRUE(got.ok()) << got.status().message();
  std::string header = R"({"__metadata__":{"format":"pt"},"a":{"data_offsets":[0,16],"dtype":"F32","shape":[2,2]},)"
                       R"("b":{"data_offsets":[16,19],"dtype":"I8","shape":[3]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  EXPECT_EQ(*got, Handmade(header, a + b));
}

TEST(SafetensorsTest, ReadsBackWhatItWrote) {
  const std::string a = Floats({1.5f, -2.0f}), c = std::string(6, '\x7f');
  Result<std::string> bytes = EncodeSafetensors(
      {{"layers.0.w", TensorDType::kBF16, {3}, c}, {"x", TensorDType::kF32, {2}, a}, {"empty", TensorDType::kF32, {0, 4}, ""}});
  ASSERT_TRUE(bytes.ok());
  Result<SafetensorsFile> f = Parse(*bytes);
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(f->tensors().size(), 3u);
  Result<const TensorEntry*> x = f->Find("x");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ((*x)->dtype, TensorDType::kF32);
  EXPECT_EQ((*x)->shape, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(f->Bytes(**x), a);
  EXPECT_EQ(f->Bytes(**f->Find("layers.0.w")), c);
  EXPECT_EQ((*f->Find("empty"))->numel(), 0);
  EXPECT_EQ(f->Find("nope").status().message(), "w.safetensors: no tensor nope");
}

TEST(SafetensorsTest, RefusesWhatTheFormatForbidsNamingFileAndTensor) {
  const std::string t16 = Floats({1, 2, 3, 4});
  const auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape, int b, int e) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(b) + "," + std::to_string(e) + "]}";
  };
  EXPECT_EQ(ErrorOf("abc"), "w.safetensors: 3 bytes, too short for a safetensors file (an 8-byte header length first)");
  EXPECT_EQ(ErrorOf(U64(64) + "{}"), "w.safetensors: truncated: the header says 64 bytes, the file has 2 after its length");
  EXPECT_NE(ErrorOf(U64(200'000'000) + "{}").find("more than the format's 100000000"), std::string::npos);
  EXPECT_NE(ErrorOf(Handmade("[1]", "")).find("header: not a JSON object"), std::string::npos);
  EXPECT_NE(ErrorOf(Handmade("{\"a\":", "")).find("w.safetensors: header:"), std::string::npos);
  EXPECT_EQ(ErrorOf(Handmade("{" + entry("a", "F32", "[2,2]", 0, 16) + "," + entry("a", "F32", "[2,2]", 0, 16) + "}", t16))
                .find("named twice") != std::string::npos,
            true);
  EXPECT_EQ(ErrorOf(Handmade("{" + entry("w", "Q4", "[2,2]", 0, 16) + "}", t16)),
            "w.safetensors: tensor w: dtype \"Q4\" is not one of F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL");
  EXPECT_EQ(ErrorOf(Handmade("{" + entry("w", "F32", "[2,3]", 0, 16) + "}", t16)),
            "w.safetensors: tensor w: data_offsets [0, 16] do not hold its F32 shape [2,3] (24 bytes)");
  // A header that lies about offsets: past the end, overlapping, a hole.
  EXPECT_EQ(ErrorOf(Handmade("{" + entry("w", "F32", "[2,2]", 0, 16) + "}", t16.substr(0, 10))),
            "w.safetensors: truncated: the header indexes 16 bytes of tensors, the file holds 10 (last tensor: w)");
  EXPECT_EQ(ErrorOf(Handmade("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12) + "}", t16)),
            "w.safetensors: tensor b: data_offsets begin at 4, where 8 (overlapping the tensor before) was expected");
  EXPECT_EQ(ErrorOf(Handmade("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[2]", 8, 16) + "}", t16)),
            "w.safetensors: tensor b: data_offsets begin at 8, where 4 (leaving a hole) was expected");
  EXPECT_EQ(ErrorOf(Handmade("{" + entry("a", "F32", "[2]", 0, 8) + "}", t16)),
            "w.safetensors: 8 bytes after the last tensor that no header entry indexes");
  EXPECT_EQ(ErrorOf(Handmade(R"({"__metadata__":{"n":1}})", "")), "w.safetensors: __metadata__.n: not a string");
  EXPECT_EQ(ErrorOf(Handmade(R"({"w":{"dtype":"F32","shape":[],"data_offsets":[0,4],"scale":1}})", t16.substr(0, 4))),
            "w.safetensors: tensor w: unknown key \"scale\" (allowed: dtype, shape, data_offsets)");
}

TEST(SafetensorsTest, RefusesToWriteBytesThatDoNotMatchTheShape) {
  Result<std::string> r = EncodeSafetensors({{"w", TensorDType::kBF16, {2, 2}, "abc"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "tensor w: 3 bytes do not match its BF16 shape");
}

TEST(SafetensorsTest, WritesAFileAsideAndMapsItBack) {
  RealFileSystem fs;
  const std::string path = fs.TempPath("kp_safetensors_test.safetensors");
  const std::string a = Floats({7, 8, 9});
  ASSERT_TRUE(WriteSafetensors(fs, path, {{"v", TensorDType::kF32, {3}, a}}).ok());
  Result<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->Bytes(**f->Find("v")), a);
  EXPECT_FALSE(fs.Exists(path + ".tmp"));
  ASSERT_TRUE(fs.Remove(path).ok());
  EXPECT_EQ(SafetensorsFile::Open(path).status().code(), Status::Code::kNotFound);
  EXPECT_EQ(SafetensorsFile::Open("/").status().message(), "/: is a directory, not a regular file");
}

}  // namespace
}  // namespace kp
