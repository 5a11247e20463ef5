// Credentials for the control plane.
//
// Note [Control-plane authentication]
// Every gRPC call to a dsagent carries the cluster token in the
// "x-dslaunch-token" metadata entry; the token comes from --token_file on both
// sides (the local launcher generates one and hands it to the agents it starts).
// The calls a controller makes for one job also carry that job's own
// credential in "x-dslaunch-job-token" (Note [Per-job credentials],
// common/rpc_auth_policy.h). Calls to the controller's rendezvous store carry
// a per-job token that the controller generates and gives to ranks in
// DSLAUNCH_STORE_TOKEN. Tokens are compared in constant time. The transport is
// plaintext gRPC unless --tls_dir is given: without it, run agents on a
// trusted network (or loopback, their default).
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>

#include "absl/status/statusor.h"

namespace dslaunch {

inline constexpr char kTokenMetadataKey[] = "x-dslaunch-token";
inline constexpr char kJobTokenMetadataKey[] = "x-dslaunch-job-token";

// Reads a token file: the first line, trimmed. Errors name the file. A file
// that other users can read is refused (it is a password), and so is a weak
// token (CheckTokenStrength).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Weak tokens are refused wherever a token is read (file or stdin): fewer
// than kMinTokenCharacters characters, or fewer than kMinTokenEntropyBits by
// the characters' own frequencies (Shannon entropy per character times the
// length: 64 random hex digits carry about 240, 32 about 110; a repeated or
// short-cycled string almost none). A heuristic: it cannot see that a long
// phrase is guessable, only that a string is short or repetitive.
inline constexpr size_t kMinTokenCharacters = 32;
inline constexpr double kMinTokenEntropyBits = 96;
absl::Status CheckTokenStrength(absl::string_view token);
double TokenEntropyBits(absl::string_view token);

// Writes `token` to a new file readable by the owner only.
absl::Status WriteTokenFile(const std::string& path, absl::string_view token);

// 32 random bytes from the kernel as 64 hex characters.
std::string GenerateToken();

// Constant-time comparison.
bool TokensEqual(absl::string_view a, absl::string_view b);

// Attaches the token to an outgoing call.
inline void AttachToken(grpc::ClientContext* context, const std::string& token) {
  context->AddMetadata(kTokenMetadataKey, token);
}

// Attaches the job's own credential to an outgoing call for that job.
inline void AttachJobToken(grpc::ClientContext* context, const std::string& job_token) {
  context->AddMetadata(kJobTokenMetadataKey, job_token);
}

// True when the call carries `expected`.
bool CallHasToken(const grpc::ServerContextBase& context, absl::string_view expected);

// The job credential the call carries; empty when it carries none.
std::string CallJobToken(const grpc::ServerContextBase& context);

}  // namespace dslaunch
