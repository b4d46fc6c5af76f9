#include "server/tls_files.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <memory>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace vismoe::server {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyFree>;

absl::Status Bad(const char* option, const std::string& path, absl::string_view why) {
  ERR_clear_error();  // leave nothing for gRPC's own OpenSSL calls to trip over
  return absl::InvalidArgumentError(absl::StrCat("option ", option, ": ", path, " ", why));
}

absl::StatusOr<std::string> Read(const char* option, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Bad(option, path, "cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Refuses to prompt for a passphrase: an encrypted key fails to load.
int NoPassword(char*, int, int, void*) { return 0; }

}  // namespace

absl::StatusOr<TlsKeyPair> LoadTlsKeyPair(const std::string& cert_path,
                                          const std::string& key_path) {
  TlsKeyPair pair;
  absl::StatusOr<std::string> cert = Read("tls_cert", cert_path);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = Read("tls_key", key_path);
  if (!key.ok()) return key.status();
  pair.cert_chain = *std::move(cert);
  pair.private_key = *std::move(key);

  BioPtr cert_bio = MemoryBio(pair.cert_chain);
  X509Ptr leaf(PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassword, nullptr));
  if (leaf == nullptr) {
    return Bad("tls_cert", cert_path,
               "holds no PEM certificate (expected a -----BEGIN CERTIFICATE----- block)");
  }
  BioPtr key_bio = MemoryBio(pair.private_key);
  KeyPtr pkey(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassword, nullptr));
  if (pkey == nullptr) {
    return Bad("tls_key", key_path,
               "holds no readable PEM private key (expected an unencrypted -----BEGIN PRIVATE "
               "KEY----- block)");
  }
  if (X509_check_private_key(leaf.get(), pkey.get()) != 1) {
    return Bad("tls_key", key_path,
               absl::StrCat("is not the key of the first certificate in ", cert_path));
  }
  ERR_clear_error();
  return pair;
}

}  // namespace vismoe::server
