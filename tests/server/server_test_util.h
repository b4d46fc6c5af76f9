// Helpers for tests that talk to a VismoeServer over a real loopback gRPC
// connection: start-up with port 0, a Generate call that collects the stream,
// and raw (schema-less) calls to the health and reflection services.
#ifndef VISMOE_TESTS_SERVER_SERVER_TEST_UTIL_H_
#define VISMOE_TESTS_SERVER_SERVER_TEST_UTIL_H_

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "vismoe/v1/inference.grpc.pb.h"

namespace vismoe::testing {

// Options for an in-process server on 127.0.0.1 with any free ports.
inline server::ServerOptions LoopbackOptions(const std::string& model) {
  server::ServerOptions o;
  o.model = model;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "";
  o.drain_timeout = absl::Seconds(5);
  o.engine_threads = 1;
  o.decode_threads = 1;
  return o;
}

inline std::unique_ptr<v1::InferenceService::Stub> MakeStub(int port) {
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  return v1::InferenceService::NewStub(channel);
}

// Everything one Generate call produced.
struct StreamResult {
  grpc::Status status;
  std::string text;            // concatenated deltas
  std::string reasoning;       // concatenated deltas' reasoning
  std::vector<int> token_ids;  // concatenated delta ids
  int num_deltas = 0;
  bool has_final = false;
  v1::FinalResult final;
  int messages_after_final = 0;  // must stay 0
};

inline StreamResult RunGenerate(v1::InferenceService::Stub& stub, const v1::GenerateRequest& req,
                                std::chrono::milliseconds timeout = std::chrono::seconds(60),
                                const std::multimap<std::string, std::string>& metadata = {}) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  for (const auto& [k, v] : metadata) ctx.AddMetadata(k, v);
  StreamResult out;
  auto reader = stub.Generate(&ctx, req);
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    if (out.has_final) ++out.messages_after_final;
    if (msg.has_delta()) {
      ++out.num_deltas;
      out.text += msg.delta().text();
      out.reasoning += msg.delta().reasoning();
      for (int id : msg.delta().token_ids()) out.token_ids.push_back(id);
    } else if (msg.has_final()) {
      out.has_final = true;
      out.final = msg.final();
    }
  }
  out.status = reader->Finish();
  return out;
}

inline v1::GenerateRequest TextRequest(const std::string& text, int max_new_tokens) {
  v1::GenerateRequest r;
  v1::ChatMessage* m = r.add_messages();
  m->set_role("user");
  m->add_parts()->set_text(text);
  r.mutable_sampling()->set_max_new_tokens(max_new_tokens);
  return r;
}

inline std::string EncodePng(const cv::Mat& img) {
  std::vector<uchar> buf;
  EXPECT_TRUE(cv::imencode(".png", img, buf));
  return std::string(buf.begin(), buf.end());
}

// A deterministic colourful test picture (BGR).
inline cv::Mat TestPicture(int width, int height, int seed) {
  cv::Mat img(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      img.at<cv::Vec3b>(y, x) = cv::Vec3b((x * 7 + seed * 31) % 256, (y * 5 + seed * 17) % 256,
                                          ((x + y) * 3 + seed * 11) % 256);
    }
  }
  return img;
}

// grpc.health.v1.Health/Check without the health proto: the request is
// {string service = 1}, the response {enum status = 1} (1 SERVING,
// 2 NOT_SERVING). Returns -1 on an RPC error, -2 on an unparsable reply.
inline int HealthStatus(int port, const std::string& service) {
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  std::string req;
  if (!service.empty()) {
    req.push_back(0x0A);
    req.push_back(static_cast<char>(service.size()));
    req += service;
  }
  grpc::Slice slice(req);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(s); });
  grpc::Status status = done.get_future().get();
  if (!status.ok()) return -1;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -2;
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (bytes.empty()) return 0;  // UNKNOWN (default value is not serialised)
  if (bytes.size() != 2 || bytes[0] != 0x08) return -2;
  return bytes[1];
}

// Calls `method` ("/package.Service/Method") with `body` as the request bytes,
// whatever they are, and returns the call's status (the reply is dropped;
// a server-streaming method that fails before its first message reads like
// a unary one).
inline grpc::Status RawUnaryCall(int port, const std::string& method, const std::string& body) {
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::Slice slice(body);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(s); });
  return done.get_future().get();
}

// Lists services through grpc.reflection.v1alpha (bidi stream, raw bytes):
// request {string list_services = 7}; the reply carries the names as strings.
inline std::string ReflectionListServicesRaw(int port) {
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](intptr_t expect) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), expect);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  if (!step(1)) return "";
  std::string req = {0x3A, 0x01, '*'};
  grpc::Slice slice(req);
  grpc::ByteBuffer request(&slice, 1);
  call->Write(request, reinterpret_cast<void*>(2));
  step(2);
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  std::string bytes;
  if (step(3)) {
    std::vector<grpc::Slice> slices;
    (void)response.Dump(&slices);
    for (const grpc::Slice& s : slices)
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  call->WritesDone(reinterpret_cast<void*>(4));
  step(4);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return bytes;
}

// What a raw streaming call got back.
struct RawStreamResult {
  grpc::Status status;
  int responses = 0;
};

// Opens `method` as a raw stream, writes each of `bodies` in turn, half-closes
// and reads until the server ends the call. One operation is outstanding at a
// time; writes the server refused (it finished early) are not an error here.
inline RawStreamResult RawStreamCall(int port, const std::string& method,
                                     const std::vector<std::string>& bodies) {
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&ctx, method, &cq);
  intptr_t next_tag = 1;
  auto step = [&] {
    const intptr_t want = next_tag++;
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
    return ok;
  };
  auto tag = [&] { return reinterpret_cast<void*>(next_tag); };
  RawStreamResult result;
  call->StartCall(tag());
  if (step()) {
    for (const std::string& body : bodies) {
      grpc::Slice slice(body);
      grpc::ByteBuffer request(&slice, 1);
      call->Write(request, tag());
      if (!step()) break;
    }
    call->WritesDone(tag());
    step();
    grpc::ByteBuffer response;
    for (;;) {
      call->Read(&response, tag());
      if (!step()) break;
      ++result.responses;
    }
  }
  call->Finish(&result.status, tag());
  step();
  cq.Shutdown();
  void* ignored_tag = nullptr;
  bool ignored_ok = false;
  while (cq.Next(&ignored_tag, &ignored_ok)) {
  }
  return result;
}

}  // namespace vismoe::testing

#endif  // VISMOE_TESTS_SERVER_SERVER_TEST_UTIL_H_
