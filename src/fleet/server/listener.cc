#include "fleet/server/listener.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "fleet/server/raw_headers.h"
#include "fleet/server/server_log.h"

namespace ferry::fleet::server_internal {

namespace {

// The reasons OpenSSL queued for the last failure, oldest first; clears the queue.
std::string OpenSslErrors() {
  std::string text;
  while (unsigned long code = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(code);
    char buffer[256];
    if (reason == nullptr) {
      ERR_error_string_n(code, buffer, sizeof(buffer));
      reason = buffer;
    }
    if (!text.empty()) text += "; ";
    text += reason;
  }
  return text.empty() ? "unknown OpenSSL error" : text;
}

Status CheckReadable(const std::string& what, const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::Invalid("server: " + what + " " + path + " is a directory, not a file");
  }
  errno = 0;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return Status::Invalid("server: cannot read " + what + " " + path + ": " +
                           std::strerror(errno));
  }
  std::fclose(file);
  return Status::OK();
}

// "Jan  2 03:04:05 2027 GMT" for a certificate time.
std::string FormatTime(const ASN1_TIME* time) {
  BIO* out = BIO_new(BIO_s_mem());
  if (out == nullptr) return "?";
  std::string text = "?";
  if (ASN1_TIME_print(out, time) == 1) {
    char* data = nullptr;
    const long size = BIO_get_mem_data(out, &data);
    if (size > 0) text.assign(data, static_cast<size_t>(size));
  }
  BIO_free(out);
  return text;
}

}  // namespace

Status CheckTlsOptions(const ServerOptions& options) {
  const bool cert = !options.tls_cert_file.empty();
  const bool key = !options.tls_key_file.empty();
  if (cert && !key) {
    return Status::Invalid(
        "server: --tls-cert needs --tls-key (the private key of the certificate)");
  }
  if (key && !cert) {
    return Status::Invalid("server: --tls-key needs --tls-cert (the certificate of the key)");
  }
  if (cert) {
    FERRY_RETURN_NOT_OK(CheckReadable("TLS certificate file", options.tls_cert_file));
    FERRY_RETURN_NOT_OK(CheckReadable("TLS key file", options.tls_key_file));
  }
  if (!options.ca_file.empty()) FERRY_RETURN_NOT_OK(CheckReadable("CA file", options.ca_file));
  return Status::OK();
}

Result<std::unique_ptr<httplib::Server>> MakeListener(const ServerOptions& options) {
  FERRY_RETURN_NOT_OK(CheckTlsOptions(options));
  if (options.tls_cert_file.empty()) return MakeHeaderKeepingServer();  // raw_headers.h

  const std::string& cert_file = options.tls_cert_file;
  const std::string& key_file = options.tls_key_file;
  std::string error;
  std::string warning;
  ERR_clear_error();
  auto server = MakeHeaderKeepingTlsServer([&](SSL_CTX& ctx) {  // raw_headers.h
    SSL_CTX_set_options(&ctx,
                        SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
    if (SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION) != 1) {
      error = "cannot require TLS 1.2: " + OpenSslErrors();
      return false;
    }
    if (SSL_CTX_use_certificate_chain_file(&ctx, cert_file.c_str()) != 1) {
      error = "cannot load the TLS certificate from " + cert_file +
              " (expected PEM, the server's certificate first): " + OpenSslErrors();
      return false;
    }
    const std::string mismatch =
        "the TLS private key in " + key_file + " does not match the certificate in " + cert_file;
    if (SSL_CTX_use_PrivateKey_file(&ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      // Loading checks the key against the certificate already.
      const unsigned long last = ERR_peek_last_error();
      if (ERR_GET_LIB(last) == ERR_LIB_X509 && ERR_GET_REASON(last) == X509_R_KEY_VALUES_MISMATCH) {
        ERR_clear_error();
        error = mismatch;
      } else {
        error = "cannot load the TLS private key from " + key_file +
                " (expected an unencrypted PEM key): " + OpenSslErrors();
      }
      return false;
    }
    if (SSL_CTX_check_private_key(&ctx) != 1) {
      ERR_clear_error();
      error = mismatch;
      return false;
    }
    if (X509* leaf = SSL_CTX_get0_certificate(&ctx)) {
      if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0) {
        warning = "the TLS certificate in " + cert_file + " expired on " +
                  FormatTime(X509_get0_notAfter(leaf)) + "; clients will refuse it";
      } else if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
        warning = "the TLS certificate in " + cert_file + " is not valid before " +
                  FormatTime(X509_get0_notBefore(leaf)) + "; clients will refuse it";
      }
    }
    return true;
  });
  if (!server->is_valid()) {
    if (error.empty()) error = "cannot set up TLS: " + OpenSslErrors();
    return Status::Invalid("server: " + error);
  }
  if (!warning.empty()) ServerLog().Warn("warning: " + warning);
  return std::unique_ptr<httplib::Server>(std::move(server));
}

}  // namespace ferry::fleet::server_internal
