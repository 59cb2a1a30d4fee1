// SHA-256 against the FIPS 180-4 example vectors (NIST "Cryptographic Standards and Guidelines:
// Examples with Intermediate Values", SHA256.pdf, SHA2_Additional.pdf).
#include "train/checkpoint/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace motley::train {
namespace {

TEST(Sha256, FipsExampleVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Sha256Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, ChunkedUpdatesEqualOneShot) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>('a' + i % 26);
  Sha256 sha;
  size_t pos = 0;
  for (size_t step = 1; pos < text.size(); step = step * 3 % 97 + 1) {
    const size_t n = std::min(step, text.size() - pos);
    sha.Update(text.data() + pos, n);
    pos += n;
  }
  EXPECT_EQ(sha.HexDigest(), Sha256Hex(text));
}

}  // namespace
}  // namespace motley::train
