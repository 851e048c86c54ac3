#include "common/grpc/security.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainyard {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  const std::string pem = text.str();
  if (!absl::StrContains(pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", path, "' is not a PEM file"));
  }
  return pem;
}

std::array<unsigned char, 32> Digest(absl::string_view text) {
  std::array<unsigned char, 32> out;
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), out.data());
  return out;
}

}  // namespace

TlsConfig TlsConfigFromEnv() {
  TlsConfig tls;
  tls.cert_file = Env("TRAINYARD_TLS_CERT");
  tls.key_file = Env("TRAINYARD_TLS_KEY");
  tls.ca_file = Env("TRAINYARD_TLS_CA");
  tls.server_name = Env("TRAINYARD_TLS_SERVER_NAME");
  return tls;
}

absl::Status ValidateTlsConfig(const TlsConfig& tls, bool server) {
  if (!tls.enabled()) return absl::OkStatus();
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key: give both or neither");
  }
  if (server && tls.cert_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key: a server with TLS needs its certificate and key");
  }
  if (!tls.cert_file.empty()) {
    if (absl::Status s = ReadPem("--tls-cert", tls.cert_file).status(); !s.ok()) return s;
    if (absl::Status s = ReadPem("--tls-key", tls.key_file).status(); !s.ok()) return s;
  }
  if (!tls.ca_file.empty()) {
    if (absl::Status s = ReadPem("--tls-ca", tls.ca_file).status(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsConfig& tls,
                                                                               ClientCertificates clients) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  if (absl::Status s = ValidateTlsConfig(tls, /*server=*/true); !s.ok()) return s;
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  absl::StatusOr<std::string> key = ReadPem("--tls-key", tls.key_file);
  absl::StatusOr<std::string> cert = ReadPem("--tls-cert", tls.cert_file);
  if (!key.ok()) return key.status();
  if (!cert.ok()) return cert.status();
  pair.private_key = *key;
  pair.cert_chain = *cert;
  options.pem_key_cert_pairs.push_back(pair);
  if (clients != ClientCertificates::kNotRequested) {
    if (tls.ca_file.empty()) {
      return absl::InvalidArgumentError("--tls-ca: required to verify client certificates (mutual TLS)");
    }
    absl::StatusOr<std::string> ca = ReadPem("--tls-ca", tls.ca_file);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
    options.client_certificate_request = clients == ClientCertificates::kRequired
                                             ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                             : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsConfig& tls,
                                                                                 grpc::ChannelArguments* args) {
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  if (absl::Status s = ValidateTlsConfig(tls, /*server=*/false); !s.ok()) return s;
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem("--tls-ca", tls.ca_file);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
  }
  if (!tls.cert_file.empty()) {
    absl::StatusOr<std::string> key = ReadPem("--tls-key", tls.key_file);
    absl::StatusOr<std::string> cert = ReadPem("--tls-cert", tls.cert_file);
    if (!key.ok()) return key.status();
    if (!cert.ok()) return cert.status();
    options.pem_private_key = *key;
    options.pem_cert_chain = *cert;
  }
  if (!tls.server_name.empty() && args != nullptr) args->SetSslTargetNameOverride(tls.server_name);
  return grpc::SslCredentials(options);
}

bool IsLoopbackListen(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  std::string host = colon == std::string::npos ? listen : listen.substr(0, colon);
  host = std::string(absl::StripSuffix(absl::StripPrefix(host, "["), "]"));
  host = absl::AsciiStrToLower(host);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::Status CheckListenSecurity(const std::string& flag, const std::string& listen, const TlsConfig& tls,
                                 bool insecure) {
  if (tls.enabled() || insecure || IsLoopbackListen(listen)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": '", listen,
                   "' is reachable beyond this machine and TLS is off; give --tls-cert/--tls-key/--tls-ca "
                   "(scripts/gen-dev-certs.sh makes a throwaway CA), listen on 127.0.0.1, or pass --insecure"));
}

bool PeerHasVerifiedCertificate(const grpc::ServerContext& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  return auth != nullptr && auth->IsPeerAuthenticated() && !auth->GetPeerIdentity().empty();
}

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--auth-tokens: cannot read '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  return FromText(text.str(), path);
}

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::FromText(absl::string_view text,
                                                                                 const std::string& source) {
  auto auth = std::unique_ptr<TokenAuthenticator>(new TokenAuthenticator);
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto where = [&] { return absl::StrCat(source, ":", line_number, ": "); };
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), "expected 'NAME TOKEN', got ", fields.size(), " field(s)"));
    }
    if (fields[1].size() < 16) {
      return absl::InvalidArgumentError(absl::StrCat(where(), "the token of '", fields[0], "' has ", fields[1].size(),
                                                     " characters; at least 16 are required"));
    }
    for (const Entry& e : auth->entries_) {
      if (e.name == fields[0]) {
        return absl::InvalidArgumentError(absl::StrCat(where(), "'", fields[0], "' is named twice"));
      }
    }
    auth->entries_.push_back({std::string(fields[0]), Digest(fields[1])});
  }
  if (auth->entries_.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": no tokens"));
  return auth;
}

absl::StatusOr<std::string> TokenAuthenticator::Check(absl::string_view authorization) const {
  if (authorization.empty()) {
    return absl::UnauthenticatedError("no bearer token: set TRAINYARD_TOKEN or TRAINYARD_TOKEN_FILE");
  }
  if (!absl::ConsumePrefix(&authorization, "Bearer ")) {
    return absl::UnauthenticatedError("the authorization metadata is not 'Bearer TOKEN'");
  }
  const std::array<unsigned char, 32> digest = Digest(authorization);
  // Every entry is compared, in constant time each, so the time taken says
  // nothing about which (if any) matched.
  const Entry* match = nullptr;
  for (const Entry& e : entries_) {
    if (CRYPTO_memcmp(e.digest.data(), digest.data(), digest.size()) == 0) match = &e;
  }
  if (match == nullptr) return absl::UnauthenticatedError("unknown bearer token");
  return match->name;
}

absl::StatusOr<std::string> TokenAuthenticator::Authenticate(const grpc::ServerContext& context) const {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return Check("");
  return Check(absl::string_view(it->second.data(), it->second.size()));
}

void AddBearerToken(const std::string& token, grpc::ClientContext* context) {
  if (!token.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
}

absl::StatusOr<std::string> TokenFromEnv() {
  std::string token = Env("TRAINYARD_TOKEN");
  if (!token.empty()) return token;
  const std::string path = Env("TRAINYARD_TOKEN_FILE");
  if (path.empty()) return std::string();
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("TRAINYARD_TOKEN_FILE: cannot read '", path, "'"));
  std::getline(in, token);
  token = std::string(absl::StripAsciiWhitespace(token));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("TRAINYARD_TOKEN_FILE: '", path, "' is empty"));
  return token;
}

}  // namespace trainyard
