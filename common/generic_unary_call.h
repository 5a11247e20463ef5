// One call of any method by its full name, with an empty request, through
// gRPC's generic stub: tests use it to probe every method of a table, and
// methods no stub knows. Header-only; tests only.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/auth_token.h"

namespace dslaunch {

// The status of `full_method` called with an empty request message and, when
// `token` is not empty, `token` in "x-dslaunch-token". Bounded by 20 s.
inline grpc::Status GenericUnaryCall(const std::shared_ptr<grpc::Channel>& channel,
                                     const std::string& full_method, const std::string& token) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  if (!token.empty()) AttachToken(&context, token);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::CompletionQueue queue;
  grpc::Slice empty_message("");  // an empty protobuf message: zero bytes
  grpc::ByteBuffer request(&empty_message, 1);
  grpc::ByteBuffer reply;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&context, full_method, request, &queue);
  call->StartCall();
  int tag = 0;
  call->Finish(&reply, &status, &tag);
  void* got = nullptr;
  bool ok = false;
  if (!queue.Next(&got, &ok)) return grpc::Status(grpc::StatusCode::INTERNAL, "queue shut down");
  queue.Shutdown();
  while (queue.Next(&got, &ok)) {
  }
  return status;
}

}  // namespace dslaunch
