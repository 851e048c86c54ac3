// Transport security and authentication for Trainyard's gRPC endpoints.
//
// TLS: every process takes PEM files (its certificate chain, its key, and
// the CA its peers' certificates must chain to) from flags or the
// environment (TRAINYARD_TLS_CERT, TRAINYARD_TLS_KEY, TRAINYARD_TLS_CA,
// TRAINYARD_TLS_SERVER_NAME). Between coordinator and workers TLS is mutual:
// workers require the coordinator's client certificate on their port, and
// the coordinator requires a worker's certificate on CoordinatorService
// (its JobService, on the same port, accepts users with or without one and
// authenticates them by bearer token instead).
//
// Tokens: a file of `NAME TOKEN` lines (`#` comments); a JobService call
// carries `authorization: Bearer TOKEN` metadata and is answered
// UNAUTHENTICATED without a known token. Tokens are compared through their
// SHA-256 digests in constant time.
#ifndef TRAINYARD_COMMON_GRPC_SECURITY_H_
#define TRAINYARD_COMMON_GRPC_SECURITY_H_

#include <grpcpp/grpcpp.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainyard {

struct TlsConfig {
  std::string cert_file;  // this process's certificate chain (PEM)
  std::string key_file;   // its private key (PEM)
  std::string ca_file;    // the CA that peers' certificates chain to (PEM)
  // Client side: the name the server's certificate must carry when it is
  // not the host of the address dialled (e.g. a Service name).
  std::string server_name;

  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

// The TRAINYARD_TLS_* environment variables (empty when unset).
TlsConfig TlsConfigFromEnv();

// Checks that the files exist and make sense together: cert and key both or
// neither; a server needs both. kInvalidArgument naming the flag.
absl::Status ValidateTlsConfig(const TlsConfig& tls, bool server);

enum class ClientCertificates {
  kNotRequested,
  kOptional,  // requested, verified against ca_file when sent
  kRequired,  // mutual TLS: a call without a valid certificate is refused
};

// Insecure credentials when TLS is not enabled; errors name the file.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsConfig& tls,
                                                                               ClientCertificates clients);
// Insecure credentials when TLS is not enabled. With cert and key, they are
// presented as this process's client certificate. `args` gets the server
// name override when one is set.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsConfig& tls,
                                                                                 grpc::ChannelArguments* args);

// Whether HOST of HOST:PORT is a loopback address (127.0.0.0/8, ::1,
// localhost).
bool IsLoopbackListen(const std::string& listen);
// A server must not listen beyond loopback without TLS unless the user
// said --insecure. kInvalidArgument naming `flag` otherwise.
absl::Status CheckListenSecurity(const std::string& flag, const std::string& listen, const TlsConfig& tls,
                                 bool insecure);

// Whether the call's peer presented a certificate that verified against
// the server's CA.
bool PeerHasVerifiedCertificate(const grpc::ServerContext& context);

class TokenAuthenticator {
 public:
  // Reads `NAME TOKEN` lines; kInvalidArgument naming file:line for a bad
  // line, a duplicate name, or a token shorter than 16 characters.
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromFile(const std::string& path);
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromText(absl::string_view text,
                                                                      const std::string& source);

  // The client's name for a `Bearer TOKEN` authorization value;
  // kUnauthenticated when missing, malformed or unknown.
  absl::StatusOr<std::string> Check(absl::string_view authorization) const;
  // The same for a call's `authorization` metadata.
  absl::StatusOr<std::string> Authenticate(const grpc::ServerContext& context) const;

  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string name;
    std::array<unsigned char, 32> digest;
  };
  std::vector<Entry> entries_;
};

// The client side: adds `authorization: Bearer TOKEN` to a call (as
// metadata, so that it also travels over plaintext loopback; nothing is
// added for an empty token).
void AddBearerToken(const std::string& token, grpc::ClientContext* context);

// A bearer token from TRAINYARD_TOKEN, or the file TRAINYARD_TOKEN_FILE
// (first line); "" when neither is set. kInvalidArgument naming the file
// if it cannot be read.
absl::StatusOr<std::string> TokenFromEnv();

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_GRPC_SECURITY_H_
