#include "server/request_bytes.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "spdlog/spdlog.h"

namespace vismoe::server {
namespace {

// Lines protobuf logs on this thread while ParseRequestBytes runs.
thread_local std::string* captured_log = nullptr;

void RouteProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                      const std::string& message) {
  if (captured_log != nullptr) {
    absl::StrAppend(captured_log, message, "\n");
    return;
  }
  const std::string text =
      absl::StrCat("libprotobuf ", file, ":", line, ": ", EscapeForLog(message));
  if (level >= google::protobuf::LOGLEVEL_ERROR) {
    spdlog::error("{}", text);
  } else {
    spdlog::warn("{}", text);
  }
}

// The error for a failed parse, from what protobuf logged meanwhile.
std::string DescribeParseFailure(const std::string& log, const std::string& type, size_t size) {
  const std::string prefix = "String field '";
  const size_t at = log.find(prefix);
  if (at != std::string::npos && log.find("invalid UTF-8") != std::string::npos) {
    const size_t begin = at + prefix.size();
    const size_t end = log.find('\'', begin);
    return absl::StrCat("string field ", log.substr(begin, end - begin),
                        " is not valid UTF-8 (string fields must be UTF-8; images go in "
                        "ImagePart.data)");
  }
  return absl::StrCat("request body (", size, " bytes) is not a valid ", type,
                      ": malformed or truncated protobuf");
}

}  // namespace

void InstallProtobufLogRouting() {
  static std::once_flag once;
  std::call_once(once, [] { google::protobuf::SetLogHandler(&RouteProtobufLog); });
}

absl::Status ParseRequestBytes(const grpc::ByteBuffer& bytes, google::protobuf::MessageLite* out) {
  InstallProtobufLogRouting();
  grpc::ByteBuffer copy(bytes);  // shares the slices; the reader needs a mutable buffer
  grpc::ProtoBufferReader reader(&copy);
  std::string log;
  captured_log = &log;
  const bool parsed = reader.status().ok() && out->ParseFromZeroCopyStream(&reader);
  captured_log = nullptr;
  if (parsed) return absl::OkStatus();
  return absl::InvalidArgumentError(
      DescribeParseFailure(log, out->GetTypeName(), copy.Valid() ? copy.Length() : 0));
}

grpc::ByteBuffer SerializeToByteBuffer(const google::protobuf::MessageLite& message) {
  grpc::ByteBuffer out;
  grpc::ProtoBufferWriter writer(&out, grpc::kProtoBufferWriterMaxBufferLength,
                                 static_cast<int>(message.ByteSizeLong()));
  message.SerializeToZeroCopyStream(&writer);
  return out;
}

std::string EscapeForLog(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace vismoe::server
