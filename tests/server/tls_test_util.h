// Test helpers: a fresh P-256 key and a self-signed certificate for
// "localhost", written as PEM files, made with OpenSSL.
#ifndef VISMOE_TESTS_SERVER_TLS_TEST_UTIL_H_
#define VISMOE_TESTS_SERVER_TLS_TEST_UTIL_H_

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace vismoe::testing {

struct TlsFiles {
  std::string cert_path, key_path;  // PEM files
  std::string cert_pem;             // the certificate, as clients trust it
};

inline std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

inline void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Files <dir>/<name>.crt and <dir>/<name>.key.
inline TlsFiles MakeSelfSignedTls(const std::string& name) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 3600L * 24 * 30);
  X509_set_pubkey(cert, key);
  X509_NAME* subject = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("localhost"), -1, -1, 0);
  X509_set_issuer_name(cert, subject);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* san =
      X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, "DNS:localhost,IP:127.0.0.1");
  X509_add_ext(cert, san, -1);
  X509_EXTENSION_free(san);
  EXPECT_GT(X509_sign(cert, key, EVP_sha256()), 0);

  BIO* cert_bio = BIO_new(BIO_s_mem());
  BIO* key_bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(cert_bio, cert);
  PEM_write_bio_PrivateKey(key_bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  TlsFiles files;
  const std::string dir = ::testing::TempDir();
  files.cert_path = dir + "/" + name + ".crt";
  files.key_path = dir + "/" + name + ".key";
  files.cert_pem = BioText(cert_bio);
  WriteText(files.cert_path, files.cert_pem);
  WriteText(files.key_path, BioText(key_bio));
  BIO_free(cert_bio);
  BIO_free(key_bio);
  X509_free(cert);
  EVP_PKEY_free(key);
  return files;
}

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_SERVER_TLS_TEST_UTIL_H_
