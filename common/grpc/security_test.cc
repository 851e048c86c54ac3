#include "common/grpc/security.h"

#include <cstdlib>
#include <fstream>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

TEST(TokenAuthenticatorTest, KnownTokensNameTheirClient) {
  absl::StatusOr<std::unique_ptr<TokenAuthenticator>> auth =
      TokenAuthenticator::FromText("# users\nalice  0123456789abcdef-alice\n\nci\t0123456789abcdef-ci\n", "tokens.txt");
  ASSERT_THAT(auth.status(), IsOk());
  EXPECT_EQ((*auth)->size(), 2u);
  EXPECT_THAT((*auth)->Check("Bearer 0123456789abcdef-alice"), IsOkAndHolds(std::string("alice")));
  EXPECT_THAT((*auth)->Check("Bearer 0123456789abcdef-ci"), IsOkAndHolds(std::string("ci")));
  EXPECT_THAT((*auth)->Check(""), StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("no bearer token")));
  EXPECT_THAT((*auth)->Check("0123456789abcdef-ci"),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("not 'Bearer TOKEN'")));
  EXPECT_THAT((*auth)->Check("Bearer 0123456789abcdef-c"),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("unknown bearer token")));
  EXPECT_THAT((*auth)->Check("Bearer 0123456789abcdef-alice "), StatusCodeIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT((*auth)->Check("bearer 0123456789abcdef-alice"), StatusCodeIs(absl::StatusCode::kUnauthenticated));
}

TEST(TokenAuthenticatorTest, BadFilesNameTheLine) {
  EXPECT_THAT(
      TokenAuthenticator::FromText("alice 0123456789abcdef\nbob\n", "t.txt").status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.txt:2: expected 'NAME TOKEN', got 1 field(s)")));
  EXPECT_THAT(TokenAuthenticator::FromText("alice short\n", "t.txt").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t.txt:1: the token of 'alice' has 5 characters; at least 16")));
  EXPECT_THAT(TokenAuthenticator::FromText("a 0123456789abcdef\na 0123456789abcdeg\n", "t.txt").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.txt:2: 'a' is named twice")));
  EXPECT_THAT(TokenAuthenticator::FromText("# nothing\n", "t.txt").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.txt: no tokens")));
  EXPECT_THAT(TokenAuthenticator::FromFile("/nonexistent/tokens").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--auth-tokens: cannot read")));
}

TEST(ListenPolicyTest, PlaintextOnlyOnLoopbackUnlessInsecure) {
  for (const char* listen : {"127.0.0.1:0", "127.1.2.3:80", "localhost:5000", "[::1]:9", "LOCALHOST:1"}) {
    EXPECT_TRUE(IsLoopbackListen(listen)) << listen;
    EXPECT_THAT(CheckListenSecurity("--listen", listen, {}, false), IsOk()) << listen;
  }
  for (const char* listen : {"0.0.0.0:0", "[::]:0", "10.1.2.3:80", "coordinator:5000", "128.0.0.1:1"}) {
    EXPECT_FALSE(IsLoopbackListen(listen)) << listen;
    EXPECT_THAT(CheckListenSecurity("--listen", listen, {}, false),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("TLS is off")))
        << listen;
    EXPECT_THAT(CheckListenSecurity("--listen", listen, {}, /*insecure=*/true), IsOk()) << listen;
  }
  TlsConfig tls;
  tls.cert_file = "c.pem";
  tls.key_file = "k.pem";
  EXPECT_THAT(CheckListenSecurity("--listen", "0.0.0.0:1", tls, false), IsOk());
}

TEST(TlsConfigTest, FilesAreCheckedAndNamed) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  std::ofstream(dir + "/not.pem") << "hello";
  std::ofstream(dir + "/ok.pem") << "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  TlsConfig tls;
  EXPECT_THAT(ValidateTlsConfig(tls, true), IsOk());  // off
  tls.cert_file = dir + "/ok.pem";
  EXPECT_THAT(ValidateTlsConfig(tls, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tls-cert and --tls-key: give both")));
  tls.key_file = dir + "/not.pem";
  EXPECT_THAT(ValidateTlsConfig(tls, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tls-key: '" + dir + "/not.pem' is not a PEM")));
  tls.key_file = dir + "/ok.pem";
  tls.ca_file = dir + "/missing.pem";
  EXPECT_THAT(ValidateTlsConfig(tls, true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tls-ca: cannot read")));
  TlsConfig ca_only;
  ca_only.ca_file = dir + "/ok.pem";
  EXPECT_THAT(ValidateTlsConfig(ca_only, /*server=*/false), IsOk());  // a client that verifies the server
  EXPECT_THAT(ValidateTlsConfig(ca_only, /*server=*/true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a server with TLS needs")));
  TlsConfig no_ca;
  no_ca.cert_file = no_ca.key_file = dir + "/ok.pem";
  EXPECT_THAT(MakeServerCredentials(no_ca, ClientCertificates::kRequired).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--tls-ca: required")));
}

TEST(TokenFromEnvTest, TokenOrFile) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  unsetenv("TRAINYARD_TOKEN");
  unsetenv("TRAINYARD_TOKEN_FILE");
  EXPECT_THAT(TokenFromEnv(), IsOkAndHolds(std::string()));
  std::ofstream(dir + "/token") << "  secret-from-file-123 \nignored\n";
  setenv("TRAINYARD_TOKEN_FILE", (dir + "/token").c_str(), 1);
  EXPECT_THAT(TokenFromEnv(), IsOkAndHolds(std::string("secret-from-file-123")));
  setenv("TRAINYARD_TOKEN", "from-env", 1);
  EXPECT_THAT(TokenFromEnv(), IsOkAndHolds(std::string("from-env")));
  unsetenv("TRAINYARD_TOKEN");
  setenv("TRAINYARD_TOKEN_FILE", (dir + "/missing").c_str(), 1);
  EXPECT_THAT(TokenFromEnv(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("TRAINYARD_TOKEN_FILE")));
  unsetenv("TRAINYARD_TOKEN_FILE");
}

}  // namespace
}  // namespace trainyard
