// Requests received as raw bytes. The service takes its request bodies as
// grpc::ByteBuffer and parses them here, so that a body that is not a valid
// message (garbage, truncated, invalid UTF-8 in a string field) is answered
// INVALID_ARGUMENT naming the problem and counted like any other bad request,
// instead of gRPC's bare UNIMPLEMENTED.
//
// Protobuf reports invalid UTF-8 only through its log. The log handler
// installed by InstallProtobufLogRouting() hands the lines written while a
// parse runs on the calling thread to that parse (they become its error
// message) and sends all other protobuf log lines to spdlog, escaped.
//
// Thread safety: free functions, callable concurrently.
// Ownership: nothing is retained.
#ifndef VISMOE_SERVER_REQUEST_BYTES_H_
#define VISMOE_SERVER_REQUEST_BYTES_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"

namespace vismoe::server {

// Installs the protobuf log handler described above; idempotent.
void InstallProtobufLogRouting();

// Parses `bytes` into `out`. InvalidArgument when it is not a valid message:
// "string field vismoe.v1.ContentPart.text is not valid UTF-8 ..." or
// "request body is not a valid vismoe.v1.GenerateRequest (...)".
absl::Status ParseRequestBytes(const grpc::ByteBuffer& bytes, google::protobuf::MessageLite* out);

// `message` serialized for a raw reply. Serialization of our own messages
// does not fail.
grpc::ByteBuffer SerializeToByteBuffer(const google::protobuf::MessageLite& message);

// `text` for a log line: control characters (newline, ESC, NUL, BEL, DEL...)
// and backslashes are written as C escapes, so client-supplied text cannot
// forge or corrupt log lines. Printable text and UTF-8 are kept.
std::string EscapeForLog(absl::string_view text);

}  // namespace vismoe::server

#endif  // VISMOE_SERVER_REQUEST_BYTES_H_
