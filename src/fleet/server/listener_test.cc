#include "fleet/server/listener.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "ferry/fleet/client.h"
#include "testing/test_util.h"

namespace ferry::fleet::server_internal {
namespace {

using ferry::testing::ScratchDir;

// A self-signed P-256 certificate with subjectAltName `san`, written as PEM
// to <dir>/<name>.pem and its key to <dir>/<name>.key.
bool WriteSelfSigned(const ScratchDir& dir, const std::string& name, const std::string& san) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  bool ok = key != nullptr && cert != nullptr;
  if (ok) {
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 7);
    X509_gmtime_adj(X509_getm_notBefore(cert), -60);
    X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
    X509_set_pubkey(cert, key);
    X509_NAME* subject = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
    X509_set_issuer_name(cert, subject);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, san.c_str());
    ok = ext != nullptr && X509_add_ext(cert, ext, -1) == 1;
    X509_EXTENSION_free(ext);
    ok = ok && X509_sign(cert, key, EVP_sha256()) > 0;
  }
  if (ok) {
    std::FILE* out = std::fopen((dir / (name + ".pem")).c_str(), "w");
    ok = out != nullptr && PEM_write_X509(out, cert) == 1;
    if (out != nullptr) std::fclose(out);
    out = std::fopen((dir / (name + ".key")).c_str(), "w");
    ok = ok && out != nullptr &&
         PEM_write_PrivateKey(out, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
    if (out != nullptr) std::fclose(out);
  }
  X509_free(cert);
  EVP_PKEY_free(key);
  return ok;
}

TEST(CheckTlsOptions, WantsBothFilesAndReadableOnes) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string file = dir.Write("cert.pem", "x");
  ServerOptions options;
  EXPECT_TRUE(CheckTlsOptions(options).ok());

  options.tls_cert_file = file;
  Status status = CheckTlsOptions(options);
  EXPECT_EQ(status.code(), StatusCode::kInvalid);
  EXPECT_NE(status.message().find("--tls-cert needs --tls-key"), std::string::npos);

  options = {};
  options.tls_key_file = file;
  EXPECT_NE(CheckTlsOptions(options).message().find("--tls-key needs --tls-cert"),
            std::string::npos);

  options.tls_cert_file = dir / "missing.pem";
  EXPECT_EQ(CheckTlsOptions(options).message(), "server: cannot read TLS certificate file " +
                                                    (dir / "missing.pem") +
                                                    ": No such file or directory");
  options.tls_cert_file = dir.path();
  EXPECT_NE(CheckTlsOptions(options).message().find("is a directory"), std::string::npos);

  options = {};
  options.ca_file = dir / "nope.pem";
  EXPECT_NE(CheckTlsOptions(options).message().find("cannot read CA file"), std::string::npos);
}

TEST(MakeListener, PlainWithoutACertificate) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<httplib::Server> server, MakeListener(ServerOptions{}));
  EXPECT_TRUE(server->is_valid());
}

TEST(MakeListener, RefusesFilesThatAreNotPemOrDoNotMatch) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(WriteSelfSigned(dir, "a", "IP:127.0.0.1"));
  ASSERT_TRUE(WriteSelfSigned(dir, "b", "IP:127.0.0.1"));
  ServerOptions options;
  options.tls_cert_file = dir.Write("junk.pem", "not a certificate\n");
  options.tls_key_file = dir / "a.key";
  auto junk = MakeListener(options);
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(
      junk.status().message().find("cannot load the TLS certificate from " + options.tls_cert_file),
      std::string::npos)
      << junk.status().message();

  options.tls_cert_file = dir / "a.pem";
  options.tls_key_file = dir / "a.pem";  // a certificate where the key should be
  auto no_key = MakeListener(options);
  ASSERT_FALSE(no_key.ok());
  EXPECT_NE(no_key.status().message().find("cannot load the TLS private key"), std::string::npos)
      << no_key.status().message();

  options.tls_key_file = dir / "b.key";
  auto mismatch = MakeListener(options);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().message(), "server: the TLS private key in " + (dir / "b.key") +
                                             " does not match the certificate in " +
                                             (dir / "a.pem"));
}

ClientOptions Https(const std::string& url, const std::string& ca_file = "") {
  ClientOptions options;
  options.base_url = url;
  options.ca_file = ca_file;
  return options;
}

// A TLS listener from MakeListener, serving /hello on a free port.
class TlsServer {
 public:
  explicit TlsServer(std::unique_ptr<httplib::Server> server) : server_(std::move(server)) {
    server_->Get("/hello", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"hello": "tls"})", "application/json");
    });
    port_ = server_->bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    for (int i = 0; i < 2000 && !server_->is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  ~TlsServer() {
    server_->stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(MakeListener, ServesHttpsThatTheClientVerifies) {
  ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(WriteSelfSigned(dir, "server", "IP:127.0.0.1"));
  ASSERT_TRUE(WriteSelfSigned(dir, "stranger", "IP:127.0.0.1"));
  ServerOptions options;
  options.tls_cert_file = dir / "server.pem";
  options.tls_key_file = dir / "server.key";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<httplib::Server> listener, MakeListener(options));
  TlsServer server(std::move(listener));
  const std::string port = std::to_string(server.port());

  // The certificate is its own CA here.
  Client trusting(Https("https://127.0.0.1:" + port, dir / "server.pem"));
  ASSERT_OK_AND_ASSIGN(Response response, trusting.Get("/hello"));
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body["hello"], "tls");
  ASSERT_OK_AND_ASSIGN(Response again, trusting.Get("/hello"));  // the kept-alive connection
  EXPECT_EQ(again.status, 200);

  Client system_cas(Https("https://127.0.0.1:" + port));
  auto untrusted = system_cas.Get("/hello");
  ASSERT_FALSE(untrusted.ok());
  EXPECT_EQ(untrusted.status().code(), StatusCode::kIOError);
  EXPECT_NE(untrusted.status().message().find("TLS certificate verification failed for https://"),
            std::string::npos)
      << untrusted.status().message();
  EXPECT_NE(untrusted.status().message().find("the system's CA store"), std::string::npos);

  Client other_ca(Https("https://127.0.0.1:" + port, dir / "stranger.pem"));
  auto other = other_ca.Get("/hello");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("checked against CA file " + (dir / "stranger.pem")),
            std::string::npos)
      << other.status().message();

  // The certificate names 127.0.0.1 only.
  Client by_name(Https("https://localhost:" + port, dir / "server.pem"));
  auto mismatch = by_name.Get("/hello");
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("does not match host 'localhost'"), std::string::npos)
      << mismatch.status().message();

  Client plain(Https("http://127.0.0.1:" + port));
  auto refused = plain.Get("/hello");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("https://"), std::string::npos)
      << refused.status().message();
}

}  // namespace
}  // namespace ferry::fleet::server_internal
